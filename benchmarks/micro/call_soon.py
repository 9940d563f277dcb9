"""call_soon throughput: N callbacks through the ready queue.

WIDTH independent chains run side by side; each callback re-schedules
itself with call_soon until N callbacks have been scheduled in total, so the
ready queue always holds about WIDTH handles.
"""
import asyncio

WIDTH = 100


async def main(N):
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    ran = 0
    scheduled = 0

    def callback():
        nonlocal ran, scheduled
        ran += 1
        if scheduled < N:
            scheduled += 1
            loop.call_soon(callback)
        elif ran == N:
            done.set_result(ran)

    for _ in range(min(WIDTH, N)):
        scheduled += 1
        loop.call_soon(callback)
    await done
    return {"ops": ran}
