"""task workflow: futures whose completion fans out into more tasks.

Each of the M main tasks creates a future with a done-callback that spawns
three subtasks (each sleeps 0.1 s), spawns a consumer that sleeps 0.1 s and
then sets the future's result, and awaits one immediate subtask (sleep 0.1 s).
All main tasks are gathered; the callback-spawned subtasks are then drained
so no task is still pending when the loop is closed.
"""
import asyncio


class Workflow:
    def __init__(self):
        self.background = set()
        self.subtasks_done = 0
        self.results_set = 0

    async def subtask(self):
        await asyncio.sleep(0.1)
        self.subtasks_done += 1

    def spawn_followups(self, fut):
        loop = asyncio.get_running_loop()
        for _ in range(3):
            task = loop.create_task(self.subtask())
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    async def consumer(self, fut, i):
        await asyncio.sleep(0.1)
        fut.set_result(i)
        self.results_set += 1

    async def main_task(self, i):
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        fut.add_done_callback(self.spawn_followups)
        consumer = loop.create_task(self.consumer(fut, i))
        await loop.create_task(self.subtask())
        return consumer


async def main(M):
    flow = Workflow()
    consumers = await asyncio.gather(*(flow.main_task(i) for i in range(M)))
    await asyncio.gather(*consumers)
    # Drain: the set shrinks as tasks finish, so snapshot it until empty.
    while flow.background:
        await asyncio.gather(*list(flow.background))
    return {
        "main_tasks": M,
        "results_set": flow.results_set,
        "subtasks_done": flow.subtasks_done,  # 1 immediate + 3 follow-ups each
    }
