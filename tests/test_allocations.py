"""Python-object cost of scheduling callbacks: swordfish must not allocate
more than the stdlib loop does.

Two counters, both deterministic with the cyclic GC disabled:
  * GC-tracked objects alive (``len(gc.get_objects())``);
  * pymalloc blocks alive (``sys.getallocatedblocks()``), which also sees
    Python objects that are not GC-tracked.
Each is read before scheduling N callbacks, after scheduling them (the cost
of N pending callbacks), and after running them (what is left behind).
Counts are compared per callback between swordfish and asyncio, measured in
the same process on the same interpreter; nothing is timed. Handles waiting in
swordfish's reuse pool are not counted as left behind (see _snapshot).
"""

import asyncio
import contextvars
import contextlib
import gc
import sys

import pytest

from conftest import require_swordfish, run_iterations

N = 10_000
# Per-callback slack for interpreter noise (free lists, lazily grown
# containers): 0.05 objects per callback is 500 objects over the whole run.
SLACK = 0.05


def _cb(*args):
    pass


def _snapshot(loop):
    # swordfish keeps handles that ran and that nobody refers to for reuse (one pymalloc
    # block each, not GC-tracked while they wait); that pool is a cache bounded by the
    # largest recent burst and trimmed when unused (see test_spare_pool_*), not a leak.
    pooled = sum(loop._spare_stats()) if hasattr(loop, "_spare_stats") else 0
    return len(gc.get_objects()), sys.getallocatedblocks() - pooled


def _schedulers(loop):
    ctx = contextvars.copy_context()

    def call_soon(n):
        for _ in range(n):
            loop.call_soon(_cb)

    def call_soon_arg(n):
        for i in range(n):
            loop.call_soon(_cb, i)

    def call_soon_context(n):
        for _ in range(n):
            loop.call_soon(_cb, context=ctx)

    def call_soon_threadsafe(n):
        for _ in range(n):
            loop.call_soon_threadsafe(_cb)

    def call_later(n):
        for _ in range(n):
            loop.call_later(0, _cb)

    def call_at(n):
        when = loop.time()
        for _ in range(n):
            loop.call_at(when, _cb)

    def call_later_cancelled(n):
        handles = [loop.call_later(3600, _cb) for _ in range(n)]
        for h in handles:
            h.cancel()
        del handles[:]

    return {
        "call_soon": call_soon,
        "call_soon_arg": call_soon_arg,
        "call_soon_context": call_soon_context,
        "call_soon_threadsafe": call_soon_threadsafe,
        "call_later": call_later,
        "call_at": call_at,
        "call_later_cancelled": call_later_cancelled,
    }


@contextlib.contextmanager
def _gc_paused():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _measure(loop, method, n):
    """(pending objects, pending blocks, leftover objects, leftover blocks)
    per callback."""
    schedule = _schedulers(loop)[method]
    gc.collect()
    with _gc_paused():
        obj0, blk0 = _snapshot(loop)
        schedule(n)
        obj1, blk1 = _snapshot(loop)
        run_iterations(loop, 2)
        obj2, blk2 = _snapshot(loop)
    return (
        (obj1 - obj0) / n,
        (blk1 - blk0) / n,
        (obj2 - obj0) / n,
        (blk2 - blk0) / n,
    )


def _measure_in_running_loop(loop, method, n):
    """Same, but scheduling happens inside a callback of the running loop."""
    out = []

    def inside():
        out.append(_measure_running(loop, method, n))

    loop.call_soon(inside)
    run_iterations(loop, 3)
    return out[0]


def _measure_running(loop, method, n):
    schedule = _schedulers(loop)[method]
    with _gc_paused():
        obj0, blk0 = _snapshot(loop)
        schedule(n)
        obj1, blk1 = _snapshot(loop)
    return (obj1 - obj0) / n, (blk1 - blk0) / n


def _both(method, measure=_measure):
    sf = require_swordfish()
    results = {}
    for name, factory in (("asyncio", asyncio.new_event_loop), ("swordfish", sf.new_event_loop)):
        loop = factory()
        try:
            measure(loop, method, 200)  # warm up lazily created state
            results[name] = measure(loop, method, N)
        finally:
            loop.close()
    return results["asyncio"], results["swordfish"]


METHODS = [
    "call_soon",
    "call_soon_arg",
    "call_soon_context",
    "call_soon_threadsafe",
    "call_later",
    "call_at",
    "call_later_cancelled",
]


@pytest.mark.parametrize("method", METHODS)
def test_swordfish_pending_callback_cost_at_most_stdlib(method):
    std, sf = _both(method)
    std_obj, std_blk = std[0], std[1]
    sf_obj, sf_blk = sf[0], sf[1]
    assert sf_obj <= std_obj + SLACK, (
        f"{method}: swordfish keeps {sf_obj:.2f} GC-tracked objects per pending "
        f"callback, asyncio {std_obj:.2f}"
    )
    assert sf_blk <= std_blk + SLACK, (
        f"{method}: swordfish keeps {sf_blk:.2f} pymalloc blocks per pending "
        f"callback, asyncio {std_blk:.2f}"
    )


@pytest.mark.parametrize("method", METHODS)
def test_swordfish_leaves_nothing_behind_after_running(method):
    std, sf = _both(method)
    std_obj, std_blk = std[2], std[3]
    sf_obj, sf_blk = sf[2], sf[3]
    assert sf_obj <= max(std_obj, 0) + SLACK, (
        f"{method}: {sf_obj:.3f} GC-tracked objects per callback left after running "
        f"(asyncio {std_obj:.3f})"
    )
    assert sf_blk <= max(std_blk, 0) + SLACK, (
        f"{method}: {sf_blk:.3f} pymalloc blocks per callback left after running "
        f"(asyncio {std_blk:.3f})"
    )


@pytest.mark.parametrize("method", ["call_soon", "call_soon_arg", "call_later", "call_soon_threadsafe"])
def test_swordfish_scheduling_cost_inside_running_loop(method):
    std, sf = _both(method, _measure_in_running_loop)
    assert sf[0] <= std[0] + SLACK, (sf, std)
    assert sf[1] <= std[1] + SLACK, (sf, std)


def _measure_futures(loop, kind, n):
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    keep = []
    try:
        obj0, blk0 = _snapshot(loop)
        if kind == "create_future":
            for _ in range(n):
                keep.append(loop.create_future())
        elif kind == "future_done_callback":
            for _ in range(n):
                f = loop.create_future()
                f.add_done_callback(_cb)
                f.set_result(None)
        obj1, blk1 = _snapshot(loop)
        del keep[:]
        run_iterations(loop, 2)
        obj2, blk2 = _snapshot(loop)
    finally:
        if was_enabled:
            gc.enable()
    return (obj1 - obj0) / n, (blk1 - blk0) / n, (obj2 - obj0) / n, (blk2 - blk0) / n


@pytest.mark.parametrize("kind", ["create_future", "future_done_callback"])
def test_swordfish_future_cost_at_most_stdlib(kind):
    std, sf = _both(kind, _measure_futures)
    for i, what in enumerate(["pending objects", "pending blocks", "leftover objects", "leftover blocks"]):
        assert sf[i] <= max(std[i], 0) + SLACK, f"{kind} {what}: swordfish {sf[i]:.3f}, asyncio {std[i]:.3f}"


def test_no_growth_over_many_iterations(loop):
    """A callback that reschedules itself 20,000 times leaves nothing behind."""
    count = [0]

    def again():
        count[0] += 1
        if count[0] < 20_000:
            loop.call_soon(again)
        else:
            loop.stop()

    loop.call_soon(again)
    loop.run_forever()  # warm up
    count[0] = 0
    gc.collect()
    gc.disable()
    try:
        obj0, blk0 = _snapshot(loop)
        loop.call_soon(again)
        loop.run_forever()
        obj1, blk1 = _snapshot(loop)
    finally:
        gc.enable()
    assert count[0] == 20_000
    assert obj1 - obj0 < 100
    assert blk1 - blk0 < 200


BURST = 3_000


def _counted_allocations(schedule):
    """GC-counted allocations made by `schedule()` (the count that triggers the next
    collection: every new GC-tracked object adds one)."""
    with _gc_paused():
        before = gc.get_count()[0]
        schedule()
        return gc.get_count()[0] - before


@pytest.mark.parametrize("kind", ["call_soon", "call_later"])
def test_spare_pool_serves_a_repeated_burst_without_new_handles(sf_loop, kind):
    # Thousands of callbacks queued at once (timers of many tasks firing together): their
    # handles come back to the pool after running, and the next burst reuses them, so it
    # allocates nothing that brings the cyclic GC's next collection closer.
    ctx = contextvars.copy_context()
    index = 0 if kind == "call_soon" else 1

    def burst():
        for i in range(BURST):
            if kind == "call_soon":
                sf_loop.call_soon(_cb, i, context=ctx)
            else:
                sf_loop.call_later(0, _cb, i, context=ctx)

    gc.collect()
    first = _counted_allocations(burst)
    run_iterations(sf_loop, 2)
    pooled = sf_loop._spare_stats()[index]
    assert pooled >= BURST
    again = _counted_allocations(burst)
    assert first >= BURST  # the first burst did allocate its handles
    assert again < BURST // 20, f"{again} GC-counted allocations for {BURST} reused handles"
    run_iterations(sf_loop, 2)
    assert sf_loop._spare_stats()[index] == pooled


def test_spare_pool_gives_back_what_stays_unused(sf_loop):
    # Once a second the pool frees half of what no callback needed during the last second.
    for i in range(BURST):
        sf_loop.call_soon(_cb, i)
    run_iterations(sf_loop, 2)
    pooled = sf_loop._spare_stats()[0]
    assert pooled >= BURST

    async def idle():
        for _ in range(3):
            await asyncio.sleep(1.05)

    sf_loop.run_until_complete(idle())
    left = sf_loop._spare_stats()[0]
    assert left <= pooled // 2, (pooled, left)
