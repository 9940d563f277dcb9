"""How often a server's threads take the GIL, and switch, per request: the proxy the
multi-core issue names for a machine with more cores than this one. A design whose requests
cross between threads under one GIL takes it several times a request and switches threads
as often; one whose I/O runs without it takes it about once. Counted with a uprobe on
CPython's `take_gil` (perf, as root), system-wide while the load runs, so the load
generator must not be Python (wrk is not).

    gil.py [--servers A,B] [--workers 1,2] [--workloads hello,echo10k] [--seconds 5]

The servers run unpinned on every CPU with `wrk -t<CPUs> -c256` beside them (the suite's
shared form); names as in run.py (`NAME+--flag=value` for a variant). Results are printed
as a table and saved to results/gil-*.json.
"""
import argparse
import os
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import (APPS, CONNECTIONS, RESULTS, WORKLOADS, app_of, context_switches, cpus, entry,  # noqa: E402
                 server_label, split_name)
from rounds import free_port, save_results  # noqa: E402
from servers import ServerProcess  # noqa: E402

EVENT = "probe_libpython3:take_gil"


def libpython():
    return os.path.join(sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY"))


def ensure_probe():
    """The uprobe on take_gil (a static function: perf finds it in the symbol table)."""
    listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout
    if EVENT not in listed:
        subprocess.run(["perf", "probe", "-x", libpython(), "take_gil"], check=True, capture_output=True)


def wrk(url, post, seconds):
    command = ["wrk", f"-t{len(cpus())}", f"-c{CONNECTIONS}", f"-d{seconds:g}s", "--timeout", "5s", url]
    if post:
        command[1:1] = ["-s", os.path.join(os.path.dirname(HERE), "http", "wrk.lua")]
        command += ["--", "post", str(post)]
    return command


def one(name, workers, workload, seconds):
    base, extra, env = split_name(name)
    port = free_port()
    path, post = WORKLOADS[workload]
    url = f"http://127.0.0.1:{port}{path}"
    with ServerProcess(name, entry(base).builder(app_of(base), port, workers) + extra, port, APPS, env) as server:
        subprocess.run(wrk(url, post, 1), capture_output=True)
        switches0 = context_switches(server.proc.pid)
        out = subprocess.run(["perf", "stat", "-a", "-x,", "-e", EVENT, "--"] + wrk(url, post, seconds),
                             capture_output=True, text=True)
        switches = context_switches(server.proc.pid) - switches0
    if out.returncode:
        raise RuntimeError(f"perf stat / wrk failed ({out.returncode}): {out.stderr[-500:]}")
    requests = next(int(line.split()[0]) for line in out.stdout.splitlines() if "requests in" in line)
    taken = next(int(line.split(",")[0]) for line in out.stderr.splitlines() if EVENT in line)
    return {"server": name, "workers": workers, "workload": workload, "requests": requests,
            "rps": requests / seconds, "take_gil": taken, "switches": switches}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", default="swordfish-wsgi,swordfish-wsgi+--wsgi-engine=loop,granian-wsgi-bt1")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--workloads", default="hello,echo10k")
    p.add_argument("--seconds", type=float, default=5)
    args = p.parse_args(argv)
    ensure_probe()
    records = []
    for workers in map(int, args.workers.split(",")):
        for workload in args.workloads.split(","):
            for name in args.servers.split(","):
                r = one(name, workers, workload, args.seconds)
                records.append(r)
                print(f"  {name:40} w{workers} {workload:8} {r['rps']:>9.0f} req/s  take_gil/req "
                      f"{r['take_gil'] / r['requests']:6.3f}  switches/req {r['switches'] / r['requests']:6.3f}",
                      flush=True)
    save_results(RESULTS, "gil", {"seconds": args.seconds, "cpus": len(cpus())}, records)
    print("\n| server | workers | workload | req/s | `take_gil` a request | context switches a request |")
    print("|---|---:|---|---:|---:|---:|")
    for r in records:
        print(f"| {server_label(r['server'])} | {r['workers']} | {r['workload']} | {r['rps'] / 1000:.1f}k | "
              f"{r['take_gil'] / r['requests']:.2f} | {r['switches'] / r['requests']:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
