"""Which modules of CPython's ``test.test_asyncio`` the conformance run uses.

This file is data.  Each ``Module`` says how one test module is put under
the loop being checked:

* a *plain* module is loaded whole: its tests reach the loop through the
  event loop policy (``asyncio.new_event_loop()``, ``asyncio.run()``,
  ``IsolatedAsyncioTestCase``), which the child process replaces;
* a module with ``generic_mixins`` defines loop-generic test mixins plus one
  concrete class per selector (``SelectEventLoopTests``, ...).  Those
  concrete classes are dropped, and one class named ``generic_class`` is
  synthesized from the mixins whose ``create_event_loop()`` returns the loop
  being checked (the factory method is ``factory_method``, the class's
  other base ``base``: "test_utils" for test_asyncio.utils.TestCase,
  "unittest" for unittest.TestCase).  Where a per-selector class adds
  tests of its own, ``template_class`` names it: the synthesized class then
  subclasses it and only replaces its loop factory.  The module's other
  classes (``HandleTests``, ``PolicyTests``, ...) are kept.
* ``deferred_mixins`` are loop-generic mixins left out for now (with the
  reason); any class built on them is dropped as well.
* ``exclude_tests`` maps a test-id pattern (``fnmatch``, matched against the
  full id) to the reason the test is not run.

Modules with ``default=False`` only run when named with ``--modules``.
"""

from dataclasses import dataclass, field

PACKAGE = "test.test_asyncio"


@dataclass(frozen=True)
class Module:
    name: str
    default: bool = True
    why_deferred: str = ""
    generic_mixins: tuple = ()
    generic_class: str = ""
    factory_method: str = "create_event_loop"
    base: str = "test_utils"
    template_class: str = ""
    deferred_mixins: dict = field(default_factory=dict)
    exclude_tests: dict = field(default_factory=dict)

    @property
    def qualname(self):
        return f"{PACKAGE}.{self.name}"


MODULES = [
    Module("test_tasks"),
    Module("test_futures"),
    Module("test_futures2"),
    Module("test_locks"),
    Module("test_queues"),
    Module("test_taskgroups"),          # 3.11+
    Module("test_timeouts"),            # 3.11+
    Module("test_waitfor"),
    Module("test_runners"),
    Module("test_context"),
    Module("test_pep492"),
    Module("test_threads"),
    Module("test_eager_task_factory"),  # 3.12+
    Module("test_staggered"),           # 3.13+
    Module(
        "test_sock_lowlevel",
        generic_mixins=("BaseSockTestsMixin",),
        generic_class="GenericSockTests",
    ),
    Module(
        "test_events",
        generic_mixins=("EventLoopTestsMixin", "SubprocessTestsMixin"),
        generic_class="GenericEventLoopTests",
        exclude_tests={
            "*.test_create_server_multiple_hosts_ipv4":
                "patches asyncio.base_events.socket to fake bind() on addresses "
                "this host does not have; swordfish's servers do not use that module",
            "*.test_create_server_multiple_hosts_ipv6":
                "patches asyncio.base_events.socket (see the ipv4 variant)",
            "*.test_timeout_rounding":
                "counts calls of the private BaseEventLoop._run_once, which swordfish "
                "does not have (its iteration is native)",
        },
    ),
    Module("test_streams"),
    Module("test_server",
           generic_mixins=("BaseStartServer",),
           generic_class="GenericStartServerTests",
           template_class="SelectorStartServerTests", factory_method="new_loop"),
    Module("test_sendfile",
           generic_mixins=("SendfileTestsBase",),
           generic_class="GenericSendfileTests"),
    Module("test_ssl"),
    Module("test_subprocess", exclude_tests={
        "*.test_create_subprocess_fails_with_inactive_watcher":
            "expects the deprecated child-watcher machinery (removed in 3.14); swordfish "
            "watches each child through a pidfd and never consults a child watcher",
    }),
    Module("test_unix_events", exclude_tests={
        f"*.SelectorEventLoopUnixSockSendfileTests.test_sock_sendfile_{name}":
            "calls the stdlib loop's private _sock_sendfile_native_impl, inspects its "
            "_selector, or patches asyncio.unix_events.os; swordfish's sock_sendfile is "
            "covered by the other tests of this class and by test_sendfile"
        for name in ("not_available", "cancel1", "cancel2", "blocking_error",
                     "os_error_first_call", "os_error_next_call", "exception")
    }),
    Module("test_buffered_proto",
           generic_mixins=("BaseTestBufferedProtocol",),
           generic_class="GenericBufferedProtocolTests",
           template_class="BufferedProtocolSelectorTests",
           factory_method="new_loop"),
    Module("test_protocols"),
    Module("test_transports"),
]

# Modules of test.test_asyncio that are never run, and why.
NOT_APPLICABLE = {
    "test_base_events": "tests asyncio.BaseEventLoop's own implementation "
                        "(instantiates it and mocks its private methods)",
    "test_selector_events": "tests the internals of asyncio's "
                            "SelectorEventLoop and selector transports",
    "test_sslproto": "tests the internals of asyncio.sslproto with mocks",
    "test_proactor_events": "Windows proactor internals",
    "test_windows_events": "Windows only",
    "test_windows_utils": "Windows only",
}

BY_NAME = {m.name: m for m in MODULES}


def select(names=None):
    """The modules to run: the defaults, or the named ones ('all' = every
    module in MODULES)."""
    if not names:
        return [m for m in MODULES if m.default]
    if names == ["all"]:
        return list(MODULES)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"conformance: unknown module(s): {', '.join(unknown)}"
                         f" (known: {', '.join(BY_NAME)})")
    return [BY_NAME[n] for n in names]
