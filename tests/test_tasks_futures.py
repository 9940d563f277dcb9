"""Futures, tasks, task factories, eager tasks, and the asyncio primitives
running on top of the loop."""

import asyncio
import concurrent.futures
import contextvars
import gc
import re
import threading

import pytest

from conftest import PY, run_iterations, run_on, skip_asyncio_before

var = contextvars.ContextVar("task_var", default="default")


def _create_task_takes_kwargs(loop):
    import inspect

    try:
        params = inspect.signature(loop.create_task).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind is p.VAR_KEYWORD for p in params)


# ------------------------------------------------------------------ futures


def test_create_future(loop):
    fut = loop.create_future()
    assert isinstance(fut, asyncio.Future)
    assert fut.get_loop() is loop
    assert not fut.done()
    loop.call_soon(fut.set_result, "v")
    assert loop.run_until_complete(fut) == "v"


def test_future_done_callbacks_are_scheduled_not_called_inline(loop):
    fut = loop.create_future()
    got = []
    fut.add_done_callback(lambda f: got.append(f.result()))
    fut.set_result(3)
    assert got == []
    run_iterations(loop, 2)
    assert got == [3]


def test_future_done_callback_context(loop):
    fut = loop.create_future()
    ctx = contextvars.copy_context()
    ctx.run(var.set, "cb-ctx")
    got = []
    fut.add_done_callback(lambda f: got.append(var.get()), context=ctx)
    fut.set_result(None)
    run_iterations(loop, 2)
    assert got == ["cb-ctx"]


def test_future_exception(loop):
    fut = loop.create_future()
    loop.call_soon(fut.set_exception, KeyError("k"))
    with pytest.raises(KeyError):
        loop.run_until_complete(fut)


def test_future_exception_never_retrieved_is_reported(loop, no_gc):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    fut = loop.create_future()
    fut.set_exception(ZeroDivisionError("never retrieved"))
    del fut
    gc.collect()
    assert len(contexts) == 1
    assert contexts[0]["message"] == "Future exception was never retrieved"
    assert isinstance(contexts[0]["exception"], ZeroDivisionError)


def test_wrap_concurrent_future(loop):
    cf = concurrent.futures.Future()

    async def main():
        af = asyncio.wrap_future(cf, loop=loop)
        threading.Thread(target=cf.set_result, args=("from-thread",)).start()
        return await af

    assert run_on(loop, main()) == "from-thread"


def test_run_coroutine_threadsafe(loop):
    results = []

    async def add(a, b):
        await asyncio.sleep(0)
        return a + b

    async def main():
        finished = loop.create_future()

        def thread():
            cf = asyncio.run_coroutine_threadsafe(add(2, 3), loop)
            results.append(cf.result(5))
            loop.call_soon_threadsafe(finished.set_result, None)

        th = threading.Thread(target=thread)
        th.start()
        await finished
        th.join()

    run_on(loop, main())
    assert results == [5]


# -------------------------------------------------------------------- tasks


def test_create_task_basics(loop):
    async def coro():
        await asyncio.sleep(0)
        return "done"

    task = loop.create_task(coro())
    assert isinstance(task, asyncio.Task)
    assert task.get_loop() is loop
    assert re.fullmatch(r"Task-\d+", task.get_name())
    assert loop.run_until_complete(task) == "done"


def test_create_task_name(loop):
    async def main():
        t = loop.create_task(asyncio.sleep(0), name="my-task")
        assert t.get_name() == "my-task"
        t.set_name("renamed")
        assert t.get_name() == "renamed"
        await t

    run_on(loop, main())


def test_create_task_rejects_non_coroutine(loop):
    with pytest.raises(TypeError):
        loop.create_task(42)


def test_create_task_context(loop, impl):
    skip_asyncio_before(impl, (3, 11), "create_task(context=)")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "task-ctx")

    async def coro():
        seen = var.get()
        var.set("set-inside")
        return seen

    async def main():
        t = loop.create_task(coro(), context=ctx)
        return await t

    assert run_on(loop, main()) == "task-ctx"
    if PY < (3, 11):
        # 3.10's Task copies the context it starts in: the task sees ctx's values, but its
        # own changes stay in the copy (a documented difference; asyncio has no context=).
        assert ctx[var] == "task-ctx"
    else:
        assert ctx[var] == "set-inside"


def test_task_runs_in_context_copy(loop):
    async def child():
        var.set("child")
        return var.get()

    async def main():
        var.set("parent")
        assert await loop.create_task(child()) == "child"
        return var.get()

    assert run_on(loop, main()) == "parent"


def test_current_task_and_all_tasks(loop):
    async def main():
        me = asyncio.current_task()
        assert me is not None and me.get_loop() is loop
        other = loop.create_task(asyncio.sleep(10))
        tasks = asyncio.all_tasks()
        assert me in tasks and other in tasks
        assert asyncio.all_tasks(loop) == tasks
        other.cancel()
        with pytest.raises(asyncio.CancelledError):
            await other
        assert other not in asyncio.all_tasks()

    run_on(loop, main())


def test_task_cancel_with_message(loop):
    seen = []

    async def victim():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError as e:
            seen.append(e.args)
            raise

    async def main():
        t = loop.create_task(victim())
        await asyncio.sleep(0)
        t.cancel("stop it")
        with pytest.raises(asyncio.CancelledError):
            await t
        assert t.cancelled()

    run_on(loop, main())
    assert seen == [("stop it",)]


def test_run_until_complete_cancelled_task(loop):
    task = loop.create_task(asyncio.sleep(10))
    loop.call_soon(task.cancel)
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(task)


def test_task_exception_never_retrieved_is_reported(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def bad():
        raise OSError("lost")

    async def main():
        t = loop.create_task(bad())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert t.done()

    run_on(loop, main())
    gc.collect()
    messages = [c["message"] for c in contexts]
    assert messages == ["Task exception was never retrieved"]
    assert isinstance(contexts[0]["exception"], OSError)
    assert isinstance(contexts[0]["future"], asyncio.Task)


def test_task_steps_and_callbacks_keep_one_fifo_order(loop):
    # A task's steps share the ready queue with plain callbacks, in scheduling order.
    order = []

    async def step(name):
        order.append(name)
        await asyncio.sleep(0)  # a bare yield: the next step is scheduled with call_soon
        order.append(name + "'")

    def main():
        loop.call_soon(order.append, "cb1")
        loop.create_task(step("t1"))
        loop.call_soon(order.append, "cb2")
        loop.create_task(step("t2"))
        loop.call_soon(order.append, "cb3")

    loop.call_soon(main)
    run_iterations(loop, 4)
    assert order == ["cb1", "t1", "cb2", "t2", "cb3", "t1'", "t2'"]


def test_task_step_that_raises_is_reported_with_its_handle(loop):
    # A task's step that cannot start (another task is marked current on the loop, so
    # `_enter_task` refuses) raises RuntimeError: the loop reports it like any failed
    # callback, with a handle, and goes on.
    seen = []
    loop.set_exception_handler(lambda lp, ctx: seen.append(ctx))
    intruder = object()

    async def never():
        return 1

    def occupy():
        asyncio.tasks._enter_task(loop, intruder)

    def release():
        asyncio.tasks._leave_task(loop, intruder)

    async def main():
        # The callbacks are queued around the new task's first step.
        loop.call_soon(occupy)
        task = loop.create_task(never())
        loop.call_soon(release)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return task

    task = loop.run_until_complete(main())
    assert not task.done()
    assert len(seen) == 1, seen
    ctx = seen[0]
    assert ctx["message"].startswith("Exception in callback ")
    assert isinstance(ctx["exception"], RuntimeError)
    assert "Cannot enter into task" in str(ctx["exception"])
    assert callable(ctx["handle"].cancel)
    # The task never ran and has no step queued: let it go without a report.
    task._log_destroy_pending = False
    asyncio.tasks._unregister_task(task)
    task.get_coro().close()


def test_keyboard_interrupt_in_task_step_leaves_the_rest_queued(loop):
    order = []
    tasks = []

    async def interrupt():
        raise KeyboardInterrupt

    async def after():
        order.append("after")

    def schedule():
        tasks.append(loop.create_task(interrupt()))
        loop.create_task(after())
        loop.call_soon(order.append, "cb")

    loop.call_soon(schedule)
    with pytest.raises(KeyboardInterrupt):
        run_iterations(loop, 3)
    assert order == []
    run_iterations(loop, 2)
    assert order == ["after", "cb"]
    assert isinstance(tasks[0].exception(), KeyboardInterrupt)


def test_many_tasks(loop):
    async def work(i):
        await asyncio.sleep(0)
        return i * 2

    async def main():
        return await asyncio.gather(*(work(i) for i in range(5000)))

    assert run_on(loop, main()) == [i * 2 for i in range(5000)]


# ------------------------------------------------------------ task factory


def test_task_factory(loop):
    assert loop.get_task_factory() is None
    made = []

    def factory(lp, coro, **kwargs):
        assert lp is loop
        t = asyncio.Task(coro, loop=lp, **kwargs)
        made.append(t)
        return t

    loop.set_task_factory(factory)
    assert loop.get_task_factory() is factory

    async def main():
        t = loop.create_task(asyncio.sleep(0, "x"), name="factory-made")
        assert t.get_name() == "factory-made"
        return await t

    assert loop.run_until_complete(main()) == "x"
    # run_until_complete's own task comes from the factory too
    assert len(made) == 2
    loop.set_task_factory(None)
    assert loop.get_task_factory() is None
    loop.run_until_complete(asyncio.sleep(0))
    assert len(made) == 2


def test_task_factory_receives_context(loop):
    if PY < (3, 11):
        pytest.skip("task factories take context= from Python 3.11 (Task has no context before)")
    got = []

    def factory(lp, coro, **kwargs):
        got.append(sorted(kwargs))
        return asyncio.Task(coro, loop=lp, **kwargs)

    loop.set_task_factory(factory)
    ctx = contextvars.copy_context()
    ctx.run(var.set, "factory-ctx")

    async def child():
        return var.get()

    async def main():
        return await loop.create_task(child(), context=ctx)

    assert run_on(loop, main()) == "factory-ctx"
    assert ["context"] in got


def test_task_factory_must_be_callable(loop):
    with pytest.raises(TypeError, match="task factory must be a callable or None"):
        loop.set_task_factory(42)


def test_eager_task_factory(loop):
    if PY < (3, 12):
        pytest.skip("asyncio.eager_task_factory needs Python 3.12+")
    loop.set_task_factory(asyncio.eager_task_factory)
    order = []

    async def child():
        order.append("child-start")
        assert asyncio.current_task() is not None
        await asyncio.sleep(0)
        order.append("child-end")

    async def main():
        t = loop.create_task(child())
        order.append("after-create")
        await t

    run_on(loop, main())
    assert order == ["child-start", "after-create", "child-end"]


def test_create_task_eager_start(loop, impl):
    if PY < (3, 12):
        pytest.skip("Task(eager_start=) needs Python 3.12+")
    if impl == "asyncio" and not _create_task_takes_kwargs(loop):
        pytest.skip("this stdlib's loop.create_task() takes no **kwargs")
    order = []

    async def finishes_at_once():
        order.append("ran")
        return "eager-result"

    async def suspends():
        me = asyncio.current_task()
        order.append(("suspends", me is not None))
        await asyncio.sleep(0)
        order.append("resumed")

    async def main():
        t = loop.create_task(finishes_at_once(), eager_start=True)
        assert order == ["ran"]
        assert t.done() and t.result() == "eager-result"
        t2 = loop.create_task(suspends(), eager_start=True, name="eager-named")
        assert order == ["ran", ("suspends", True)]
        assert not t2.done()
        assert t2.get_name() == "eager-named"
        await t2
        t3 = loop.create_task(finishes_at_once(), eager_start=False)
        assert not t3.done()
        await t3

    run_on(loop, main())
    assert order == ["ran", ("suspends", True), "resumed", "ran"]


# ----------------------------------------------------- asyncio primitives


def test_gather_wait_shield(loop):
    async def val(v, d=0):
        await asyncio.sleep(d)
        return v

    async def main():
        assert await asyncio.gather(val(1), val(2), val(3)) == [1, 2, 3]
        res = await asyncio.gather(val(1), asyncio.sleep(0, result=None), return_exceptions=True)
        assert res == [1, None]
        fast = loop.create_task(val("fast"))
        slow = loop.create_task(val("slow", 10))
        done, pending = await asyncio.wait({fast, slow}, return_when=asyncio.FIRST_COMPLETED)
        assert done == {fast} and pending == {slow}
        slow.cancel()
        inner = loop.create_task(val("shielded", 0.01))
        outer = asyncio.ensure_future(asyncio.shield(inner))
        await asyncio.sleep(0)
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
        assert await inner == "shielded"
        got = [await f for f in asyncio.as_completed([val("b", 0.02), val("a", 0.0)])]
        assert got == ["a", "b"]

    run_on(loop, main())


def test_taskgroup(loop):
    if PY < (3, 11):
        pytest.skip("TaskGroup needs Python 3.11+")

    async def fail():
        await asyncio.sleep(0)
        raise ValueError("in group")

    async def main():
        async with asyncio.TaskGroup() as tg:
            a = tg.create_task(asyncio.sleep(0, "a"))
        assert a.result() == "a"
        sleeper_cancelled = []

        async def sleeper():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                sleeper_cancelled.append(True)
                raise

        with pytest.raises(ExceptionGroup) as ei:  # noqa: F821 (3.11+)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(sleeper())
                tg.create_task(fail())
        assert [type(e) for e in ei.value.exceptions] == [ValueError]
        assert sleeper_cancelled == [True]

    run_on(loop, main())


def test_queue_lock_event_semaphore_condition(loop):
    async def main():
        q = asyncio.Queue(maxsize=2)
        out = []

        async def producer():
            for i in range(20):
                await q.put(i)
            await q.put(None)

        async def consumer():
            while (item := await q.get()) is not None:
                out.append(item)

        await asyncio.gather(producer(), consumer())
        assert out == list(range(20))

        lock = asyncio.Lock()
        inside = []

        async def locked(i):
            async with lock:
                inside.append(i)
                assert len(inside) == 1
                await asyncio.sleep(0)
                inside.pop()

        await asyncio.gather(*(locked(i) for i in range(5)))

        sem = asyncio.Semaphore(2)
        active, peak = [0], [0]

        async def limited():
            async with sem:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
                await asyncio.sleep(0.001)
                active[0] -= 1

        await asyncio.gather(*(limited() for _ in range(6)))
        assert peak[0] == 2

        ev = asyncio.Event()
        loop.call_later(0.001, ev.set)
        await asyncio.wait_for(ev.wait(), 5)

        cond = asyncio.Condition()
        ready = []

        async def waiter():
            async with cond:
                await cond.wait_for(lambda: ready)
                return ready[0]

        w = loop.create_task(waiter())
        await asyncio.sleep(0)
        async with cond:
            ready.append("go")
            cond.notify_all()
        assert await w == "go"

    run_on(loop, main())


def test_to_thread(loop):
    async def main():
        var.set("propagated")
        return await asyncio.to_thread(lambda: (var.get(), threading.get_ident()))

    value, ident = run_on(loop, main())
    assert value == "propagated"
    assert ident != threading.get_ident()
