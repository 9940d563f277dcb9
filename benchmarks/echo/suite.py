"""The echo benchmark's measurement plan: probing what each implementation
supports, then the rounds of echo, TLS, bulk and idle-memory measurements.

Within a round every implementation runs once, in a rotating order (the
native reference after the first mode's loops), so background noise on the
shared machine spreads over all of them. Records are plain dicts:
  test ("echo" | "tls" | "bulk" | "idle"), impl, mode, size, conc, repeat,
  ok, error (when not ok) and the client's metrics (rps, mibps, p50_us,
  p99_us; mibps for bulk; bytes_per_conn for idle) plus server_cpu (the
  share of one CPU the server used while the client ran).
"""
import sys
import time

import procs

NATIVE = "native"
# The native reference again, polling for up to 50 µs before each wait that would sleep, as
# swordfish's loop does while its events come that close together.
NATIVE_POLL = "native-poll"
NATIVES = (NATIVE, NATIVE_POLL)


class Plan:
    """What to run; built by run.py from the command line."""

    def __init__(self, loops, modes, sizes, concurrency, tests, duration, warmup,
                 repeat, bulk_bytes, idle_count, pin=True, client="native"):
        self.loops, self.modes, self.sizes = loops, modes, sizes
        self.concurrency, self.tests = concurrency, tests
        self.duration, self.warmup, self.repeat = duration, warmup, repeat
        self.bulk_bytes, self.idle_count = bulk_bytes, idle_count
        self.server_pin, self.client_pin = procs.pin_prefixes(0, 1, pin)
        # Which client drives the plain ping-pong runs (TLS always uses client.py).
        self.client = client


class Suite:
    def __init__(self, plan):
        self.plan = plan
        # (impl, mode, tls) -> None when supported, else the reason.
        self.support = {}
        self.versions = {}
        self.records = []

    # -- probing ----------------------------------------------------------

    def supported(self, impl, mode, tls=False):
        """Probe once per (impl, mode, tls): start the server, echo 1 KiB and
        100 KiB, compare. Returns None or the reason it is n/a."""
        key = (impl, NATIVE if impl in NATIVES else mode, tls)
        if key not in self.support:
            self.support[key] = self._probe(impl, mode, tls)
            if self.support[key]:
                label = f"{impl} {key[1]}{' tls' if tls else ''}"
                print(f"echo: {label}: n/a ({self.support[key]})", file=sys.stderr)
        return self.support[key]

    def _probe(self, impl, mode, tls):
        error = self._check(impl, mode, tls)
        if error and impl not in NATIVES and "[server:" not in error:
            # Loops report errors on accepted connections only in debug
            # mode: ask again in debug mode to learn the server's side.
            again = self._check(impl, mode, tls, debug=True)
            if again and "[server:" in again:
                error += " [server in debug mode:" + again.split("[server:", 1)[1]
        return error

    def _check(self, impl, mode, tls, debug=False):
        plan = self.plan
        try:
            with procs.running_server(impl, mode, tls, plan.server_pin,
                                      debug) as server:
                self.versions.setdefault(impl, server.version)
                argv = ["check", "--port", str(server.port)]
                if tls:
                    argv += ["--tls", procs.CERT_FILE]
                _, error = procs.run_client(argv, plan.client_pin, 30, server)
                return f"echo check failed: {error}" if error else None
        except procs.Unsupported as exc:
            return str(exc)
        except procs.ServerFailed as exc:
            return f"server failed to start: {exc}"

    # -- one measurement --------------------------------------------------

    def measure(self, test, impl, mode, tls, client_argv, timeout, **fields):
        rec = dict(test=test, impl=impl, mode=mode, **fields)
        try:
            with procs.running_server(impl, mode, tls, self.plan.server_pin) as server:
                argv = [client_argv[0], "--port", str(server.port)] + client_argv[1:]
                if "--server-pid" in argv:
                    argv[argv.index("--server-pid") + 1] = str(server.pid)
                cpu0, wall0 = procs.cpu_seconds(server.pid), time.monotonic()
                native = self.plan.client == "native"
                out, error = procs.run_client(argv, self.plan.client_pin, timeout,
                                              server, native=native)
                rec["client"] = ("native" if native and procs.native_client_usable(argv)
                                 else "python")
                cpu1, wall1 = procs.cpu_seconds(server.pid), time.monotonic()
        except (procs.Unsupported, procs.ServerFailed) as exc:
            out, error, cpu0 = None, f"server: {exc}", None
        rec["ok"] = error is None
        if error:
            rec["error"] = error
        else:
            rec.update(out)
            if cpu0 is not None and cpu1 is not None:
                # Share of one CPU the server used while the client ran.
                rec["server_cpu"] = (cpu1 - cpu0) / (wall1 - wall0)
        self.records.append(rec)
        return rec

    # -- the plan -----------------------------------------------------------

    def jobs(self):
        """Yield (label, callable) for every measurement, in run order."""
        plan = self.plan
        impls = plan.loops
        for rep in range(plan.repeat):
            shift = rep % len(impls)
            order = impls[shift:] + impls[:shift]
            if "echo" in plan.tests:
                for conc in plan.concurrency:
                    for size in plan.sizes:
                        for i, mode in enumerate(plan.modes):
                            for impl in order:
                                yield self._echo_job(impl, mode, size, conc, rep, False)
                            if i == 0:
                                for native in NATIVES:
                                    yield self._echo_job(native, None, size, conc, rep, False)
            if "tls" in plan.tests:
                for conc in plan.concurrency:
                    for size in plan.sizes:
                        for impl in order:
                            yield self._echo_job(impl, "proto", size, conc, rep, True)
            for test in ("bulk", "idle"):
                if test in plan.tests:
                    for impl in order + [NATIVE]:
                        yield self._extra_job(test, impl, rep)

    def _echo_job(self, impl, mode, size, conc, rep, tls):
        plan = self.plan
        test = "tls" if tls else "echo"
        label = f"{test} {mode or '-'} {size} c{conc} {impl}"

        def run():
            if self.supported(impl, mode, tls):
                return None
            argv = ["pingpong", "--size", str(size), "--concurrency", str(conc),
                    "--duration", str(plan.duration), "--warmup", str(plan.warmup)]
            if tls:
                argv += ["--tls", procs.CERT_FILE]
            return self.measure(test, impl, mode, tls, argv,
                                plan.warmup + plan.duration + 60,
                                size=size, conc=conc, repeat=rep)
        return label, self._seconds_echo(), run

    def _extra_job(self, test, impl, rep):
        plan = self.plan
        label = f"{test} proto {impl}"

        def run():
            if self.supported(impl, "proto"):
                return None
            if test == "bulk":
                argv = ["bulk", "--total", str(plan.bulk_bytes)]
            else:
                argv = ["idle", "--count", str(plan.idle_count), "--server-pid", "0"]
            return self.measure(test, impl, "proto", False, argv, 300, repeat=rep)
        seconds = 3.0 if test == "bulk" else 2.0 + plan.idle_count / 5000
        return label, seconds, run

    def _seconds_echo(self):
        return self.plan.warmup + self.plan.duration + 0.6

    def run(self):
        jobs = list(self.jobs())
        estimate = sum(seconds for _, seconds, _ in jobs)
        print(f"echo: {len(jobs)} measurements, roughly {estimate / 60:.0f} min",
              file=sys.stderr, flush=True)
        started = time.monotonic()
        for i, (label, _, run) in enumerate(jobs, 1):
            rec = run()
            shown = "n/a" if rec is None else describe(rec)
            print(f"[{i}/{len(jobs)}] {label}: {shown}", file=sys.stderr, flush=True)
        return time.monotonic() - started


def describe(rec):
    if not rec["ok"]:
        return "FAILED: " + rec["error"]
    if rec["test"] in ("echo", "tls"):
        return (f"{rec['rps']:,.0f} req/s, {rec['mibps']:,.1f} MiB/s, "
                f"p50 {rec['p50_us']:.0f} us, p99 {rec['p99_us']:.0f} us")
    if rec["test"] == "bulk":
        return f"{rec['mibps']:,.0f} MiB/s ({rec['seconds']:.2f} s)"
    return f"{rec['bytes_per_conn'] / 1024:.2f} KiB per connection"
