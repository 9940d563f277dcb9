"""One echo server process on one event loop.

    python server.py --loop LOOP --mode MODE [--port 0] [--tls CERT_DIR]

LOOP: asyncio, uvloop, rloop, swordfish. MODE:
  raw       loop.sock_accept, one task per connection,
            sock_recv(c, 102400) -> sock_sendall
  stream    asyncio.start_server, reader.readline() -> writer.write + drain
  proto     Protocol.data_received -> transport.write
  buffered  BufferedProtocol: get_buffer returns a preallocated memoryview,
            buffer_updated(n) -> transport.write(bytes(view[:n]))
--tls CERT_DIR (proto mode only) serves TLS with CERT_DIR/cert.pem and key.pem.

Prints `READY <port> <loop version>` once listening, then serves until killed.
When the loop cannot do the mode it prints `UNSUPPORTED <reason>` and exits
with status 3 instead; the runner shows that as "n/a (reason)".
"""
import argparse
import asyncio
import importlib
import os
import resource
import socket
import ssl
import sys

UNSUPPORTED_EXIT = 3
RAW_RECV = 102400
# 100 KiB messages exceed StreamReader's default 64 KiB line limit.
STREAM_LIMIT = 1 << 20
BUFFERED_SIZE = 256 * 1024
BACKLOG = 4096


def loop_module(name):
    if name == "asyncio":
        return asyncio
    module = importlib.import_module(name)
    if getattr(module, "__file__", None) is None:
        raise ImportError(f"{name} is an empty namespace package: not built yet")
    return module


def loop_version(name):
    if name == "asyncio":
        return sys.version.split()[0]
    version = getattr(loop_module(name), "__version__", None)
    if version is None:
        from importlib.metadata import PackageNotFoundError, version as dist_version
        try:
            version = dist_version(name)
        except PackageNotFoundError:
            version = "unknown"
    return version


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class EchoProtocol(asyncio.Protocol):
    """data_received -> write; stops reading while the write buffer is full."""

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)

    def pause_writing(self):
        self.transport.pause_reading()

    def resume_writing(self):
        self.transport.resume_reading()


class BufferedEchoProtocol(asyncio.BufferedProtocol):
    """Reads into one preallocated buffer per connection, writes a copy back."""

    def __init__(self):
        self.view = memoryview(bytearray(BUFFERED_SIZE))

    def connection_made(self, transport):
        self.transport = transport

    def get_buffer(self, sizehint):
        return self.view

    def buffer_updated(self, nbytes):
        self.transport.write(bytes(self.view[:nbytes]))

    def pause_writing(self):
        self.transport.pause_reading()

    def resume_writing(self):
        self.transport.resume_reading()


def listening_socket(host, port):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


async def start_raw(loop, sock):
    # A loop without the sock_* API fails here, before READY, not mid-run.
    for name in ("sock_accept", "sock_recv", "sock_sendall"):
        if not callable(getattr(loop, name, None)):
            raise NotImplementedError(f"loop has no {name}()")
    handlers = set()

    async def echo(conn):
        try:
            while True:
                data = await loop.sock_recv(conn, RAW_RECV)
                if not data:
                    break
                await loop.sock_sendall(conn, data)
        except ConnectionError:
            pass
        finally:
            conn.close()

    async def accept_forever():
        while True:
            conn, _ = await loop.sock_accept(sock)
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(echo(conn))
            handlers.add(task)
            task.add_done_callback(handlers.discard)

    return loop.create_task(accept_forever()), handlers


async def start_stream(loop, sock):
    async def echo(reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                writer.write(line)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(echo, sock=sock, limit=STREAM_LIMIT,
                                      backlog=BACKLOG)


async def start_protocol(loop, sock, factory, ssl_context=None):
    kwargs = {"ssl": ssl_context} if ssl_context is not None else {}
    # Servers listen() again with their own backlog (asyncio: 100).
    return await loop.create_server(factory, sock=sock, backlog=BACKLOG, **kwargs)


def tls_context(cert_dir):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(os.path.join(cert_dir, "cert.pem"),
                        os.path.join(cert_dir, "key.pem"))
    return ctx


def start(loop, args):
    """Start serving on the loop; return (port, object to keep alive)."""
    sock = listening_socket(args.host, args.port)
    port = sock.getsockname()[1]
    if args.mode == "raw":
        coro = start_raw(loop, sock)
    elif args.mode == "stream":
        coro = start_stream(loop, sock)
    elif args.mode == "proto":
        coro = start_protocol(loop, sock, EchoProtocol,
                              tls_context(args.tls) if args.tls else None)
    else:
        coro = start_protocol(loop, sock, BufferedEchoProtocol)
    return port, loop.run_until_complete(coro)


def entry_point(args):
    """The API call that starts serving in this mode, for n/a reasons."""
    return {"raw": "loop.sock_accept/sock_recv/sock_sendall",
            "stream": "asyncio.start_server()",
            "proto": "loop.create_server(ssl=...)" if args.tls else "loop.create_server()",
            "buffered": "loop.create_server() with a BufferedProtocol"}[args.mode]


def unsupported(reason):
    print(f"UNSUPPORTED {reason}", flush=True)
    return UNSUPPORTED_EXIT


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loop", required=True,
                   choices=["asyncio", "uvloop", "rloop", "swordfish"])
    p.add_argument("--mode", required=True,
                   choices=["raw", "stream", "proto", "buffered"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--tls", metavar="CERT_DIR",
                   help="serve TLS (proto mode) with CERT_DIR/{cert,key}.pem")
    p.add_argument("--debug", action="store_true",
                   help="loop debug mode: errors on accepted connections are "
                        "logged to stderr (the runner uses it to explain a "
                        "failed echo check)")
    args = p.parse_args(argv)
    if args.tls and args.mode != "proto":
        p.error("--tls is only measured in proto mode")
    raise_fd_limit()

    loop = loop_module(args.loop).new_event_loop()
    asyncio.set_event_loop(loop)
    if args.debug:
        loop.set_debug(True)
    try:
        port, keep_alive = start(loop, args)
    except NotImplementedError as exc:
        detail = f" ({exc})" if str(exc) else ""
        return unsupported(f"not implemented: {entry_point(args)}{detail}")
    except (TypeError, AttributeError, ValueError, ssl.SSLError) as exc:
        # How a loop that lacks a feature may refuse its arguments.
        return unsupported(f"{entry_point(args)} raised {type(exc).__name__}: {exc}")
    print(f"READY {port} {loop_version(args.loop)}", flush=True)
    try:
        loop.run_forever()
    finally:
        del keep_alive
    return 0


if __name__ == "__main__":
    sys.exit(main())
