"""sleep(0) ping-pong: two tasks alternately yield with asyncio.sleep(0).

N is the total number of sleep(0) calls across both tasks.
"""
import asyncio


async def player(rounds, log):
    for _ in range(rounds):
        await asyncio.sleep(0)
        log.append(None)


async def main(N):
    log = []
    await asyncio.gather(player(N // 2, log), player(N - N // 2, log))
    return {"ops": len(log)}
