"""Micro-benchmarks: each module exposes ``async def main(N)`` that performs
N operations of one kind and returns a dict with an "ops" count equal to N.
The runner reports N / (time of run_until_complete) as ops/s.
"""

# Module name -> name used in tables and --workloads.
MICRO = {
    "call_soon": "call_soon",
    "timer_churn": "timer-churn",
    "sleep0_pingpong": "sleep0-ping-pong",
    "future_roundtrip": "future-set-await",
    "threadsafe": "call_soon_threadsafe",
}
