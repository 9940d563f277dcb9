"""producer-consumer: M producers, each handing a future to its own consumer.

Each producer creates a future, spawns a consumer task that sleeps 0.03 s and
sets a result string, awaits the future, then sleeps 0.05 s.
"""
import asyncio


async def consumer(fut, i):
    await asyncio.sleep(0.03)
    fut.set_result(f"item-{i}")


async def producer(i):
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    # The local reference keeps the consumer task alive until we are done.
    task = loop.create_task(consumer(fut, i))
    result = await fut
    await asyncio.sleep(0.05)
    assert task.done()
    return result


async def main(M):
    results = await asyncio.gather(*(producer(i) for i in range(M)))
    return {
        "producers": M,
        "results": len(results),
        "distinct_results": len(set(results)),
    }
