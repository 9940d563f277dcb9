"""call_soon_threadsafe: a worker thread posts N callbacks to the loop,
which counts them; the run ends when the N-th has run.

Under the runner's taskset pinning both threads share one CPU, the same for
every loop, so this measures the hand-off cost rather than parallelism."""
import asyncio
import threading


async def main(N):
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    count = 0

    def callback():
        nonlocal count
        count += 1
        if count == N:
            done.set_result(count)

    def post():
        for _ in range(N):
            loop.call_soon_threadsafe(callback)

    thread = threading.Thread(target=post, name="poster")
    thread.start()
    if N:
        await done
    thread.join()
    return {"ops": count}
