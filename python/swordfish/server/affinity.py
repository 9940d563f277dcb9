"""`--worker-cpu-affinity`: which CPU each worker process is confined to, if any.

A worker's threads hand every WSGI request across (the loop thread to an app thread and
back) and share one GIL. Where those threads run on different CPUs, each hand-off wakes a
thread on the other CPU, which costs far more than a switch on the same one (an
inter-processor interrupt; on a virtual machine, an exit to the hypervisor). Confining the
whole worker to one CPU keeps the hand-offs local: two WSGI workers on two CPUs, 400 users,
went from 61-67k to 69-71k requests in 6 s (the ASGI server's figure on that machine) and
their p95 from 7-16 ms to 1.4-6.4 ms (docs/design.md, "One CPU per worker").

`auto` does it only when there are as many workers as CPUs the server may use (the usual
`--workers $(nproc)`, nginx's `worker_cpu_affinity auto`): every CPU then gets one worker,
as the kernel would spread them anyway. With fewer workers than CPUs, fixed CPUs would put
every instance of the server on a host on the same first CPUs; that stays the kernel's
choice unless `on` is asked for. Nor does `auto` leave the WSGI thread engine's workers
pinned: they hand nothing across, and their threads poll and run in turn, which on one CPU
would each time wait for the other; two such workers on two shared CPUs served 50.6k hello
requests a second pinned and 100.7k unpinned (docs/design.md). With `--wsgi-engine
threads` they are not pinned; with `auto` the supervisor cannot tell (it does not import
the app), so a worker whose app turns out to be WSGI takes back the supervisor's CPUs
(`unpin_to_parent`)."""

import os


def can_pin():
    return hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")


def worker_cpus(mode, workers, wsgi_engine="auto"):
    """The CPU of each worker slot (a list, indexed by slot modulo its length), or None
    when the workers are left where the kernel puts them. ValueError for `on` where a
    process cannot be confined to a CPU."""
    if mode == "off" or (mode == "auto" and wsgi_engine == "threads"):
        return None
    if not can_pin():
        if mode == "on":
            raise ValueError("--worker-cpu-affinity on: this platform cannot confine a process to a CPU "
                             "(no sched_setaffinity)")
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if mode == "on" or (workers > 1 and workers == len(allowed)):
        return allowed
    return None


def allowed_cpus():
    """How many CPUs this process may run on."""
    if can_pin():
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def unpin_to_parent():
    """A worker that the supervisor confined to fewer CPUs than it may use itself takes
    them all back (every thread of this process)."""
    if not can_pin():
        return
    try:
        parent = os.sched_getaffinity(os.getppid())
        if not os.sched_getaffinity(0) < parent:
            return
        _confine(parent)
    except OSError:  # the supervisor is gone, or a platform that will not tell
        pass


def pin_this_process(cpu):
    """Confine every thread of this process to cpu (threads started later inherit it)."""
    _confine({cpu})


def _confine(cpus):
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # a thread that has just ended
            pass
