"""The event loops a conformance run can check, and how one is installed.

A *loop kind* names an event loop implementation: its policy class, its
loop factory and the class its loops are instances of.  ``install(kind)``
makes it the loop every test gets by default, and keeps it so when a test
module resets the policy with ``asyncio.set_event_loop_policy(None)``.

``uvloop`` is only a stand-in to check the plumbing on a non-stdlib loop
(in a scratch virtualenv that has it); it is never a project dependency.
"""

import asyncio
import asyncio.events
import importlib
import warnings


class LoopKind:
    def __init__(self, name, module, policy, factory, loop_class):
        self.name = name
        self.module = module          # what must be importable
        self._policy = policy         # attribute names in that module
        self._factory = factory
        self._loop_class = loop_class

    def _get(self, dotted):
        obj = importlib.import_module(self.module)
        for part in dotted.split("."):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                obj = getattr(obj, part)
        return obj

    def policy_class(self):
        return self._get(self._policy)

    def loop_class(self):
        return self._get(self._loop_class)

    def version(self):
        module = importlib.import_module(self.module)
        if self.module == "asyncio":
            return ""
        return str(getattr(module, "__version__", ""))

    def new_loop(self):
        """A new loop of this kind, made without going through the policy."""
        if self._factory is None:
            loop = self.policy_class()().new_event_loop()
        else:
            loop = self._get(self._factory)()
        note_loop_created()
        return loop


KINDS = {
    "swordfish": LoopKind("swordfish", "swordfish", "EventLoopPolicy",
                          "new_event_loop", "Loop"),
    # The stdlib default loop, made by its default policy: like for like.
    "asyncio": LoopKind("asyncio", "asyncio", "DefaultEventLoopPolicy",
                        None, "BaseEventLoop"),
    "uvloop": LoopKind("uvloop", "uvloop", "EventLoopPolicy",
                       "new_event_loop", "Loop"),
}

# How many loops of the kind under test were made: the recorder reads it
# around each test to tell which tests ran on that loop at all.
_loops_created = 0
counting = True


def note_loop_created():
    global _loops_created
    _loops_created += 1


def loops_created():
    return _loops_created


def _counting_policy(base):
    """A subclass of ``base`` that counts the loops its new_event_loop makes;
    ``base`` itself if it cannot be subclassed."""
    global counting

    def new_event_loop(self):
        loop = super(cls, self).new_event_loop()
        note_loop_created()
        return loop

    try:
        cls = type(base.__name__, (base,), {"new_event_loop": new_event_loop,
                                            "__module__": base.__module__})
    except TypeError:
        counting = False
        return base
    return cls


def install(kind):
    """Make ``kind`` the default loop of this process, for good.

    ``set_event_loop_policy(None)`` (the usual tearDown/tearDownModule reset)
    installs a fresh policy of ``kind`` instead of the stdlib default; any
    other policy a test sets is set as asked.  ``new_event_loop()``,
    ``asyncio.run()`` and ``asyncio.Runner`` reach the loop via the policy.
    """
    policy_class = _counting_policy(kind.policy_class())
    events = asyncio.events

    def wrap(original):
        def set_event_loop_policy(policy):
            if policy is None:
                policy = policy_class()
            original(policy)
        set_event_loop_policy.__wrapped__ = original
        set_event_loop_policy.__name__ = original.__name__
        return set_event_loop_policy

    # 3.14 moved the setter to a private function that the public,
    # deprecated one calls: wrap both so either path keeps the kind.
    if hasattr(events, "_set_event_loop_policy"):
        events._set_event_loop_policy = wrap(events._set_event_loop_policy)
    public = wrap(events.set_event_loop_policy)
    events.set_event_loop_policy = public
    asyncio.set_event_loop_policy = public

    # If something clears the global directly, the lazy default is ours too.
    if hasattr(events, "_init_event_loop_policy"):
        def _init_event_loop_policy():
            with events._lock:
                if events._event_loop_policy is None:
                    events._event_loop_policy = policy_class()
        events._init_event_loop_policy = _init_event_loop_policy

    public(None)
    return policy_class


def self_check(kind):
    """Raise if asyncio's default loop creation does not give ``kind``."""
    global _loops_created
    expected = kind.loop_class()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        loop = asyncio.new_event_loop()
    try:
        if not isinstance(loop, expected):
            raise RuntimeError(
                f"asyncio.new_event_loop() gave {type(loop).__qualname__}, "
                f"not a {expected.__module__}.{expected.__qualname__}")
    finally:
        loop.close()
    _loops_created = 0
