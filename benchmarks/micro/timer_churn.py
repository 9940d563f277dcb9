"""timer churn: schedule N call_later timers with varied delays, cancel half.

Delays spread over 0-5 ms (deterministic, no RNG) so the timer heap sees
out-of-order insertions; every second handle is cancelled straight away and
the run ends when the other half has fired.
"""
import asyncio


async def main(N):
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    expected = N - N // 2
    fired = 0

    def on_timer():
        nonlocal fired
        fired += 1
        if fired == expected:
            done.set_result(fired)

    handles = [loop.call_later((i * 7919 % 1000) * 5e-6, on_timer)
               for i in range(N)]
    for handle in handles[1::2]:
        handle.cancel()
    if expected:
        await done
    return {"ops": N, "fired": fired, "cancelled": N // 2}
