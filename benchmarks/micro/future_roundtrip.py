"""future set/await: N times create a future, set its result from a
call_soon callback, and await it."""
import asyncio


async def main(N):
    loop = asyncio.get_running_loop()
    total = 0
    for i in range(N):
        fut = loop.create_future()
        loop.call_soon(fut.set_result, i)
        total += await fut
    return {"ops": N, "sum": total}
