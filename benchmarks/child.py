"""Run one measurement in this (fresh) process and print one JSON line.

    python child.py LOOP KIND MODULE SIZE    time workloads.MODULE / micro.MODULE
    python child.py --probe LOOP             check LOOP can be imported and run

Only loop.run_until_complete(main(SIZE)) is timed. The runner puts the
swordfish source tree on PYTHONPATH, so a failing `import swordfish` shows
up here as an error line rather than as a crash of the runner.
"""
import asyncio
import importlib
import json
import sys
import time


def loop_module(name):
    if name == "asyncio":
        return asyncio
    module = importlib.import_module(name)
    if getattr(module, "__file__", None) is None:
        # An empty source directory on PYTHONPATH imports as a namespace package.
        raise ImportError(f"{name} is an empty namespace package at "
                          f"{list(module.__path__)}: not built yet")
    return module


def new_loop(name):
    return loop_module(name).new_event_loop()


def loop_version(name):
    if name == "asyncio":
        return sys.version.split()[0]
    module = loop_module(name)
    version = getattr(module, "__version__", None)
    if version is None:
        try:
            from importlib.metadata import version as dist_version
            version = dist_version(name)
        except Exception:
            version = "unknown"
    return version


def probe(name):
    loop = new_loop(name)
    try:
        asyncio.set_event_loop(loop)

        async def ping():
            await asyncio.sleep(0)
            return "pong"

        assert loop.run_until_complete(ping()) == "pong"
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    return {"loop": name, "version": loop_version(name),
            "location": getattr(loop_module(name), "__file__", None),
            "python": sys.version.split()[0]}


def measure(name, kind, module_name, size):
    package = {"workload": "workloads", "micro": "micro"}[kind]
    main = importlib.import_module(f"{package}.{module_name}").main
    loop = new_loop(name)
    asyncio.set_event_loop(loop)
    coro = main(size)
    try:
        start = time.perf_counter()
        result = loop.run_until_complete(coro)
        elapsed = time.perf_counter() - start
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    return {"loop": name, "kind": kind, "name": module_name, "size": size,
            "time": elapsed, "result": result}


def main(argv):
    if len(argv) == 2 and argv[0] == "--probe":
        out = probe(argv[1])
    elif len(argv) == 4:
        out = measure(argv[0], argv[1], argv[2], int(argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
