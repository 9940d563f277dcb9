"""call_later / call_at / time(): ordering, precision, cancellation."""

import asyncio
import math
import contextvars
import random
import time

import pytest

from conftest import PY, run_on, skip_asyncio_before
from conftest import run_iterations as run_callbacks

var = contextvars.ContextVar("tvar", default="default")




def run_until_future(loop, fut, timeout=10):
    return run_on(loop, asyncio.wait_for(fut, timeout), timeout + 1)


# ---------------------------------------------------------------- time()


def test_time_is_float_and_monotonic(loop):
    values = [loop.time() for _ in range(1000)]
    assert all(isinstance(v, float) for v in values)
    assert values == sorted(values)


def test_time_advances_at_real_rate(loop):
    t0, m0 = loop.time(), time.monotonic()
    while time.monotonic() - m0 < 0.05:
        pass
    t1, m1 = loop.time(), time.monotonic()
    assert abs((t1 - t0) - (m1 - m0)) < 0.02


def test_swordfish_clock_resolution_is_1us_or_better(sf_loop):
    """swordfish only: consecutive loop.time() readings must be able to
    differ by 1 us or less."""
    smallest = float("inf")
    deadline = time.monotonic() + 0.5
    prev = sf_loop.time()
    while time.monotonic() < deadline:
        now = sf_loop.time()
        if now != prev:
            smallest = min(smallest, now - prev)
            prev = now
            if smallest <= 1e-6:
                break
    assert smallest <= 1e-6, f"smallest clock step was {smallest * 1e6:.1f} us"


def test_sub_millisecond_timer(loop):
    fut = loop.create_future()
    h = loop.call_later(0.0003, lambda: fut.set_result(loop.time()))
    fired_at = run_until_future(loop, fut)
    assert fired_at >= h.when()
    # generous: the point is that 0.3 ms is not rounded up to something huge
    assert fired_at - h.when() < 0.1


# ---------------------------------------------------------- TimerHandle


def test_call_later_returns_timer_handle(loop):
    before = loop.time()
    h = loop.call_later(10, print)
    after = loop.time()
    assert isinstance(h.when(), float)
    assert before + 10 <= h.when() <= after + 10
    h.cancel()


def test_call_at_when_is_exact(loop):
    when = loop.time() + 12.345678
    h = loop.call_at(when, print)
    assert h.when() == when
    h.cancel()
    assert h.cancelled()
    assert h.when() == when


def test_timer_handles_order_by_when(loop):
    t = loop.time()
    h1 = loop.call_at(t + 1, print)
    h2 = loop.call_at(t + 2, print)
    assert h1 < h2 and h2 > h1
    assert h1 <= h2 and h2 >= h1
    assert h1 <= h1 and h1 >= h1
    assert h1 == h1 and h1 != h2
    assert sorted([h2, h1]) == [h1, h2]
    assert hash(h1) == hash(h1)
    h1.cancel()
    h2.cancel()


def test_call_later_int_delay(loop):
    got = []
    loop.call_later(0, got.append, "int")
    run_callbacks(loop)
    assert got == ["int"]


def test_none_delay_and_when_are_type_errors(loop):
    with pytest.raises(TypeError):
        loop.call_later(None, print)
    with pytest.raises((TypeError, AssertionError) if PY < (3, 11) else TypeError):
        loop.call_at(None, print)


def test_timer_args_and_context(loop, impl):
    ctx = contextvars.copy_context()
    ctx.run(var.set, "timer-ctx")
    got = []
    fut = loop.create_future()

    def cb(a, b):
        got.append((a, b, var.get()))
        fut.set_result(None)

    h = loop.call_later(0.001, cb, 1, 2, context=ctx)
    run_until_future(loop, fut)
    assert got == [(1, 2, "timer-ctx")]
    if impl == "swordfish" or PY >= (3, 12):
        assert h.get_context() is ctx


# ------------------------------------------------------------- ordering


def test_timers_fire_in_deadline_order(loop):
    order = []
    fut = loop.create_future()
    loop.call_later(0.03, lambda: (order.append("c"), fut.set_result(None)))
    loop.call_later(0.01, order.append, "a")
    loop.call_later(0.02, order.append, "b")
    run_until_future(loop, fut)
    assert order == ["a", "b", "c"]


def test_timers_never_fire_early(loop):
    rng = random.Random(1234)
    late = []
    early = []
    remaining = [200]
    fut = loop.create_future()

    def cb(handle_box):
        now = loop.time()
        h = handle_box[0]
        if now < h.when():
            early.append((h.when(), now))
        late.append(now - h.when())
        remaining[0] -= 1
        if remaining[0] == 0:
            fut.set_result(None)

    for _ in range(200):
        box = []
        box.append(loop.call_later(rng.uniform(0, 0.05), cb, box))
    run_until_future(loop, fut)
    assert early == []
    assert len(late) == 200


def test_many_timers_fire_sorted(loop):
    rng = random.Random(99)
    fired = []
    n = 5000
    fut = loop.create_future()

    def cb(when):
        fired.append(when)
        if len(fired) == n:
            fut.set_result(None)

    base = loop.time()
    for _ in range(n):
        when = base + rng.uniform(0, 0.05)
        loop.call_at(when, cb, when)
    run_until_future(loop, fut)
    assert fired == sorted(fired)


def test_negative_delay_runs_after_call_soon(loop):
    # stdlib: due timers join the ready queue *after* what is already there
    order = []
    loop.call_later(-1, order.append, "a")
    loop.call_soon(order.append, "b")
    run_callbacks(loop)
    assert order == ["b", "a"]


def test_zero_delay_runs_after_call_soon(loop):
    order = []
    loop.call_later(0, order.append, "a")
    loop.call_soon(order.append, "b")
    run_callbacks(loop)
    assert order == ["b", "a"]


def test_call_soon_then_zero_delay(loop):
    order = []
    loop.call_soon(order.append, "b")
    loop.call_later(0, order.append, "a")
    run_callbacks(loop)
    assert order == ["b", "a"]


def test_negative_delays_ordered_by_deadline(loop):
    order = []
    loop.call_later(-1, order.append, "minus1")
    loop.call_later(-2, order.append, "minus2")
    loop.call_later(0, order.append, "zero")
    loop.call_at(loop.time() - 100, order.append, "past")
    run_callbacks(loop)
    assert order == ["past", "minus2", "minus1", "zero"]


def test_zero_delay_timers_keep_scheduling_order(loop):
    order = []
    for i in range(20):
        loop.call_later(0, order.append, i)
    run_callbacks(loop)
    assert order == list(range(20))


def test_timer_scheduled_from_callback_after_ready(loop):
    order = []

    def first():
        order.append("first")
        loop.call_later(0, order.append, "timer")
        loop.call_soon(order.append, "soon")

    loop.call_soon(first)
    run_callbacks(loop)
    assert order == ["first", "soon", "timer"]


def test_due_timer_runs_after_ready_callbacks_of_same_iteration(loop):
    order = []
    fut = loop.create_future()

    def busy():
        loop.call_later(0.005, order.append, "timer")
        end = time.monotonic() + 0.02
        while time.monotonic() < end:
            pass
        loop.call_soon(order.append, "soon")
        loop.call_soon(fut.set_result, None)

    loop.call_soon(busy)
    run_until_future(loop, fut)
    run_callbacks(loop)
    assert order == ["soon", "timer"]


# --------------------------------------------------------- cancellation


def test_cancelled_timer_does_not_fire(loop):
    got = []
    fut = loop.create_future()
    h = loop.call_later(0.001, got.append, "cancelled")
    loop.call_later(0.02, fut.set_result, None)
    h.cancel()
    assert h.cancelled()
    run_until_future(loop, fut)
    assert got == []


def test_cancel_timer_from_timer_due_in_same_iteration(loop):
    got = []
    fut = loop.create_future()
    handles = {}

    def schedule_then_block():
        now = loop.time()
        loop.call_at(now + 0.001, lambda: (got.append("a"), handles["b"].cancel()))
        handles["b"] = loop.call_at(now + 0.002, got.append, "b")
        loop.call_at(now + 0.003, got.append, "c")
        loop.call_at(now + 0.05, fut.set_result, None)
        end = time.monotonic() + 0.01  # all three are due at the next iteration
        while time.monotonic() < end:
            pass

    loop.call_soon(schedule_then_block)
    run_until_future(loop, fut)
    assert got == ["a", "c"]


def test_cancelled_far_timer_does_not_delay_loop(loop):
    far = loop.call_later(3600, print)
    far.cancel()
    t0 = time.monotonic()
    loop.run_until_complete(asyncio.sleep(0.01))
    assert time.monotonic() - t0 < 2


def test_loop_waits_for_timer_not_busy_spin(loop):
    # process_time advances only with CPU use: a parked loop uses almost none
    c0 = time.process_time()
    t0 = loop.time()
    loop.run_until_complete(asyncio.sleep(0.3))
    assert loop.time() - t0 >= 0.3
    assert time.process_time() - c0 < 0.1


def test_many_cancelled_timers(loop):
    got = []
    handles = [loop.call_later(0.001 * (i % 10), got.append, i) for i in range(2000)]
    for h in handles[::2]:
        h.cancel()
    loop.run_until_complete(asyncio.sleep(0.05))
    assert sorted(got) == list(range(1, 2000, 2))


def test_huge_and_infinite_delays(loop):
    h1 = loop.call_later(1e9, print)
    h2 = loop.call_at(float("inf"), print)
    assert h2.when() == float("inf")
    loop.run_until_complete(asyncio.sleep(0.001))
    h1.cancel()
    h2.cancel()


def test_nan_deadline_is_due_at_once(sf_loop):
    # The stdlib's heap runs a NaN timer at the next iteration up to 3.12 (no time is
    # earlier than it); 3.13's poll then fails with ValueError. Here it is due at once on
    # every version, ahead of timers with real deadlines, and the loop goes on.
    order = []
    sf_loop.call_later(0.01, order.append, "later")
    nan = sf_loop.call_later(float("nan"), order.append, "nan")
    sf_loop.call_at(-float("nan"), order.append, "-nan")
    sf_loop.call_later(0.02, sf_loop.stop)
    sf_loop.run_forever()
    assert order == ["nan", "-nan", "later"]
    assert math.isnan(nan.when())


def test_sleep_forever_can_be_cancelled(loop):
    async def main():
        t = asyncio.ensure_future(asyncio.sleep(float("inf")))
        await asyncio.sleep(0)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    run_on(loop, main())


# ------------------------------------------------- asyncio helpers on top


def test_sleep_duration(loop):
    async def main():
        t0 = loop.time()
        await asyncio.sleep(0.05)
        return loop.time() - t0

    assert run_on(loop, main()) >= 0.05


def test_sleep_result(loop):
    assert run_on(loop, asyncio.sleep(0.001, result="r")) == "r"


def test_wait_for_times_out(loop):
    async def main():
        fut = loop.create_future()
        t0 = loop.time()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(fut, 0.02)
        assert fut.cancelled()
        return loop.time() - t0

    assert run_on(loop, main()) >= 0.02


def test_asyncio_timeout_context(loop, impl):
    skip_asyncio_before(impl, (3, 11), "asyncio.timeout")
    if PY < (3, 11):
        pytest.skip("asyncio.timeout needs Python 3.11+")

    async def main():
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.02):
                await asyncio.sleep(10)

    run_on(loop, main())


def test_concurrent_sleeps_wake_in_order(loop):
    order = []

    async def sleeper(d):
        await asyncio.sleep(d)
        order.append(d)

    async def main():
        await asyncio.gather(*(sleeper(d) for d in (0.03, 0.01, 0.02, 0.0)))

    run_on(loop, main())
    assert order == [0.0, 0.01, 0.02, 0.03]
