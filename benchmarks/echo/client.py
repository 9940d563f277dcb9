"""Load client for the echo benchmark: blocking sockets, one JSON line out.

    python client.py check    --port P [--tls CERT]
    python client.py pingpong --port P --size N --concurrency C
                              --duration S --warmup S [--tls CERT]
    python client.py bulk     --port P --total BYTES
    python client.py idle     --port P --count N --server-pid PID

check     one 1 KiB and one 100 KiB round trip; verifies the echoed bytes.
pingpong  C processes, each with one blocking socket, send the message
          b'x'*(N-1)+b'\\n' and read until N bytes came back (closed loop).
          All connect first, then ping-pong for --warmup seconds unrecorded
          and --duration seconds recorded. Reports requests/s, MiB/s of
          echoed payload (one direction) and round-trip latency percentiles.
bulk      one connection: the main thread sends BYTES in 1 MiB writes while a
          second thread reads the echo; the time runs from the first write to
          the last byte back, so it measures the server's read-and-write-back
          throughput, bounded by the slower direction.
idle      opens N connections, one 1-byte round trip on each (so the server
          has accepted it and built its transport), then reads the server's
          VmRSS; reports the growth per connection over a baseline taken
          after one warm-up connection.
Errors go to stderr with exit status 1.
"""
import argparse
import json
import multiprocessing
import resource
import socket
import ssl
import struct
import sys
import threading
import time
from array import array

IO_TIMEOUT = 10.0
MIB = 1 << 20


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def connect(port, tls_cert=None, timeout=IO_TIMEOUT):
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls_cert:
        ctx = ssl.create_default_context(cafile=tls_cert)
        sock = ctx.wrap_socket(sock, server_hostname="localhost")
    return sock


def message(size):
    return b"x" * (size - 1) + b"\n"


def recv_exactly(sock, view, size):
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if not n:
            raise ConnectionError(f"server closed the connection after {got} "
                                  f"of {size} bytes")
        got += n


def round_trip(sock, msg, view):
    sock.sendall(msg)
    recv_exactly(sock, view, len(msg))


def check(args):
    sock = connect(args.port, args.tls, timeout=5.0)
    try:
        for size in (1024, 102400):
            msg = message(size)
            buf = bytearray(size)
            try:
                round_trip(sock, msg, memoryview(buf))
            except socket.timeout:
                raise RuntimeError(f"no echo of a {size}-byte message within 5 s")
            if buf != msg:
                raise RuntimeError(f"the echo of a {size}-byte message differs")
    finally:
        sock.close()
    return {"ok": True}


def pingpong_worker(args, pipe):
    """One client process: connect, report ready, get t0, ping-pong, send
    the recorded latencies (ns) back as raw bytes."""
    try:
        sock = connect(args.port, args.tls)
        msg = message(args.size)
        buf = bytearray(args.size)
        view = memoryview(buf)
        round_trip(sock, msg, view)
        if buf != msg:
            raise RuntimeError("the echoed message differs from the one sent")
        pipe.send_bytes(b"ready")
        t0 = struct.unpack("q", pipe.recv_bytes())[0]
        record_from = t0 + int(args.warmup * 1e9)
        end = record_from + int(args.duration * 1e9)
        latencies = array("q")
        now = time.monotonic_ns
        sendall, recv_into, size = sock.sendall, sock.recv_into, args.size
        while True:
            start = now()
            if start >= end:
                break
            sendall(msg)
            got = recv_into(view, size)
            while got < size:
                n = recv_into(view[got:], size - got)
                if not n:
                    raise ConnectionError("server closed the connection")
                got += n
            if start >= record_from:
                latencies.append(now() - start)
        sock.close()
        pipe.send_bytes(b"ok" + latencies.tobytes())
    except BaseException as exc:  # report everything, the parent decides
        pipe.send_bytes(b"er" + f"{type(exc).__name__}: {exc}".encode())


def percentile(sorted_values, fraction):
    """Nearest-rank percentile of an already sorted sequence."""
    if not sorted_values:
        return None
    rank = max(1, -(-len(sorted_values) * fraction // 1))
    return sorted_values[min(len(sorted_values), int(rank)) - 1]


def pingpong(args):
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    for _ in range(args.concurrency):
        parent_end, child_end = ctx.Pipe()
        proc = ctx.Process(target=pingpong_worker, args=(args, child_end), daemon=True)
        proc.start()
        pipes.append(parent_end)
        procs.append(proc)
    try:
        for pipe in pipes:
            if not pipe.poll(IO_TIMEOUT + 5):
                raise RuntimeError("a client process did not connect in time")
            reply = pipe.recv_bytes()
            if reply != b"ready":
                raise RuntimeError(reply[2:].decode(errors="replace"))
        t0 = struct.pack("q", time.monotonic_ns() + 10_000_000)
        for pipe in pipes:
            pipe.send_bytes(t0)
        samples = array("q")
        for pipe in pipes:
            if not pipe.poll(args.warmup + args.duration + IO_TIMEOUT + 5):
                raise RuntimeError("a client process did not finish in time")
            reply = pipe.recv_bytes()
            if reply[:2] != b"ok":
                raise RuntimeError(reply[2:].decode(errors="replace"))
            samples.frombytes(reply[2:])
    finally:
        for proc in procs:
            proc.join(2)
            if proc.is_alive():
                proc.kill()
    latencies = sorted(samples)
    requests = len(latencies)
    return {
        "requests": requests,
        "rps": requests / args.duration,
        "mibps": requests * args.size / args.duration / MIB,
        "p50_us": percentile(latencies, 0.50) / 1e3 if requests else None,
        "p99_us": percentile(latencies, 0.99) / 1e3 if requests else None,
    }


def bulk(args):
    sock = connect(args.port)
    chunk = memoryview(b"x" * MIB)
    received = [0]
    failure = []

    def reader():
        buf = bytearray(MIB)
        try:
            while received[0] < args.total:
                n = sock.recv_into(buf)
                if not n:
                    break
                received[0] += n
        except OSError as exc:
            failure.append(exc)

    thread = threading.Thread(target=reader)
    start = time.monotonic()
    thread.start()
    sent = 0
    while sent < args.total:
        piece = chunk[:min(MIB, args.total - sent)]
        sock.sendall(piece)
        sent += len(piece)
    thread.join()
    elapsed = time.monotonic() - start
    sock.close()
    if failure or received[0] != args.total:
        raise RuntimeError(f"received {received[0]} of {args.total} bytes"
                           + (f": {failure[0]}" if failure else ""))
    return {"seconds": elapsed, "mibps": args.total / MIB / elapsed}


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def close_reset(sock):
    # RST instead of FIN: thousands of sockets leave no TIME_WAIT behind.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def idle(args):
    one = bytearray(1)
    warm = connect(args.port)
    round_trip(warm, b"\n", memoryview(one))
    close_reset(warm)
    time.sleep(args.settle)
    baseline = vm_rss_kib(args.server_pid)
    socks = []
    try:
        while len(socks) < args.count:
            batch = [connect(args.port)
                     for _ in range(min(args.batch, args.count - len(socks)))]
            socks.extend(batch)
            for sock in batch:
                sock.sendall(b"\n")
            for sock in batch:
                recv_exactly(sock, memoryview(one), 1)
        time.sleep(args.settle)
        loaded = vm_rss_kib(args.server_pid)
    finally:
        for sock in socks:
            close_reset(sock)
    return {"connections": len(socks), "baseline_kib": baseline, "loaded_kib": loaded,
            "bytes_per_conn": (loaded - baseline) * 1024 / len(socks)}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("check", "pingpong", "bulk", "idle"):
        sp = sub.add_parser(name)
        sp.add_argument("--port", type=int, required=True)
        if name in ("check", "pingpong"):
            sp.add_argument("--tls", metavar="CERT", help="CA file; connect with TLS")
        if name == "pingpong":
            sp.add_argument("--size", type=int, required=True)
            sp.add_argument("--concurrency", type=int, default=1)
            sp.add_argument("--duration", type=float, default=10.0)
            sp.add_argument("--warmup", type=float, default=1.0)
        if name == "bulk":
            sp.add_argument("--total", type=int, default=1 << 30)
        if name == "idle":
            sp.add_argument("--count", type=int, default=10_000)
            sp.add_argument("--server-pid", type=int, required=True)
            sp.add_argument("--batch", type=int, default=250)
            sp.add_argument("--settle", type=float, default=0.5,
                            help="seconds to wait before reading VmRSS")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    raise_fd_limit()
    command = {"check": check, "pingpong": pingpong, "bulk": bulk, "idle": idle}
    try:
        result = command[args.command](args)
    except (OSError, RuntimeError) as exc:
        print(f"client {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
