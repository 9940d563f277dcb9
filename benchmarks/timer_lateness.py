"""How late each loop's timers fire: `await asyncio.sleep(d)` against the time it took.

    python timer_lateness.py [--loops asyncio,uvloop,rloop,swordfish] [--sleeps 200]
                             [--delay 0.0253] [--rounds 3]

Each round runs every loop (in a rotating order) in a fresh process pinned to one CPU; the
process times --sleeps sequential sleeps of --delay seconds (a delay that is not a whole
number of milliseconds, as most are) on an otherwise idle loop. The "time.sleep" row is
the same with the blocking `time.sleep`: how late this machine wakes a sleeping thread
at all, the floor for any loop. Lateness is the measured time minus the delay; a negative
figure means the timer fired early. Prints a markdown table of the median, 95th percentile
and extremes over all rounds, in microseconds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import asyncio, json, sys, time
here, name, n, delay = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
late = []
if name == "time.sleep":
    for _ in range(n):
        t = time.perf_counter(); time.sleep(delay); late.append(time.perf_counter() - t - delay)
else:
    sys.path.insert(0, here)
    from child import new_loop  # the benchmark suite's loop-by-name
    loop = new_loop(name)

    async def main():
        for _ in range(n):
            t = time.perf_counter()
            await asyncio.sleep(delay)
            late.append(time.perf_counter() - t - delay)

    loop.run_until_complete(main())
    loop.close()
print(json.dumps(late))
"""


def run_child(name, sleeps, delay, cpu):
    cmd = [sys.executable, "-c", CHILD, HERE, name, str(sleeps), str(delay)]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu)] + cmd
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{name}: {out.stderr.strip()}")
    return json.loads(out.stdout.splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default="asyncio,uvloop,rloop,swordfish")
    ap.add_argument("--sleeps", type=int, default=200)
    ap.add_argument("--delay", type=float, default=0.0253)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=1, help="CPU to pin to (-1: no pinning)")
    args = ap.parse_args()
    names = ["time.sleep"] + args.loops.split(",")
    cpu = None if args.cpu < 0 else args.cpu
    samples = {name: [] for name in names}
    for r in range(args.rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            samples[name] += run_child(name, args.sleeps, args.delay, cpu)
    print(f"{args.rounds} round(s) of {args.sleeps} sleeps of {args.delay * 1e3:g} ms; "
          f"Python {sys.version.split()[0]}; lateness in µs (negative: early)\n")
    print("| timer | median | p95 | min | max |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in names:
        s = sorted(samples[name])
        p95 = s[min(len(s) - 1, int(len(s) * 0.95))]
        print(f"| {name} | {statistics.median(s) * 1e6:.0f} | {p95 * 1e6:.0f} | "
              f"{s[0] * 1e6:.0f} | {s[-1] * 1e6:.0f} |")


if __name__ == "__main__":
    main()
