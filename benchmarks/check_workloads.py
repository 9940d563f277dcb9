#!/usr/bin/env python3
"""Check that every workload and micro-benchmark does the work it claims.

    python check_workloads.py [--loop asyncio|uvloop|rloop|swordfish]

Runs each one at a tiny size on a fresh loop (stdlib asyncio by default) and
asserts on the counts it returns; also checks that no task is left pending
and that a second run in the same process (new loop, new locks) works.
Takes a few seconds, dominated by the chat workload's fixed sleeps.
"""
import argparse
import asyncio
import importlib
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(os.path.dirname(HERE), "python"))

from child import new_loop  # noqa: E402

M = 30   # workload size: divisible by 3 so event kinds split evenly
N = 1000  # micro-benchmark operations


def run(loop_name, package, module, size):
    main = importlib.import_module(f"{package}.{module}").main
    loop = new_loop(loop_name)
    try:
        result = loop.run_until_complete(main(size))
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        assert not pending, f"{len(pending)} tasks still pending"
    finally:
        loop.close()
    return result


def check_producer_consumer(r):
    assert r["results"] == M and r["distinct_results"] == M, r


def check_task_workflow(r):
    assert r["results_set"] == M, r
    assert r["subtasks_done"] == 4 * M, r  # 1 immediate + 3 from the callback


def check_event_fiesta(r):
    assert r["users"] == r["orders"] == r["processed"] == M // 3, r
    assert r["background_done"] == r["background_expected"], r
    assert M <= r["background_expected"] <= 2 * M, r


def check_chat(r):
    assert r["logins"] == r["logouts"] == M and r["still_online"] == 0, r
    assert r["delivered"] == r["sent"], r
    assert 2 * M <= r["sent"] <= 5 * M, r


def check_food_delivery(r):
    assert r["notifications"] == r["notifications_expected"] > 0, r
    assert r["logs"] == r["logs_expected"] > 0, r


def check_micro(module):
    def check(r):
        assert r["ops"] == N, r
        if module == "timer_churn":
            assert r["fired"] == N - N // 2 and r["cancelled"] == N // 2, r
        if module == "future_roundtrip":
            assert r["sum"] == N * (N - 1) // 2, r
    return check


def cases():
    from micro import MICRO
    from workloads import WORKLOADS
    for module in WORKLOADS:
        yield "workloads", module, M, globals()[f"check_{module}"]
    for module in MICRO:
        yield "micro", module, N, check_micro(module)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loop", default="asyncio")
    loop_name = parser.parse_args().loop
    try:
        new_loop(loop_name).close()
    except Exception as exc:
        print(f"cannot create a {loop_name} loop: {type(exc).__name__}: {exc}")
        return 2
    passed = failed = 0
    for package, module, size, check in cases():
        start = time.perf_counter()
        try:
            first = run(loop_name, package, module, size)
            check(first)
            # Same process, new loop: catches state (e.g. locks) bound to the
            # first loop, and checks the seeded work is identical.
            second = run(loop_name, package, module, size)
            assert first == second, f"runs differ: {first} != {second}"
        except Exception:
            failed += 1
            print(f"FAIL {package}.{module} on {loop_name}")
            traceback.print_exc()
            continue
        passed += 1
        print(f"ok   {package}.{module} on {loop_name} "
              f"({time.perf_counter() - start:.2f} s)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
