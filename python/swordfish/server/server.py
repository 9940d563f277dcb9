"""`Server`: binds, runs lifespan, serves connections with the native `HttpProtocol`, and
shuts down gracefully (stop accepting, close idle connections, let in-flight requests
finish up to the graceful timeout, then close the rest)."""

import asyncio
import logging
import os
import random
import signal
import socket
import sys
import time

from .. import _native
from .._tls import TlsMixin
from .affinity import allowed_cpus, unpin_to_parent
from .balance import REFRESH, AcceptGate, ConnectionBoard
from .config import Config
from .lifespan import Lifespan, LifespanFailed
from .logs import access_logger, access_logger_for, reopen_files
from .proxy import ProxyHeaders, RsgiProxyHeaders, TrustedHosts
from .wsgi import WsgiProxyHeaders, detect_interface, environ_template

logger = logging.getLogger("swordfish.error")

_DRAIN_ITERATIONS = 8  # loop iterations between closing the listeners and closing idle connections
_CANCELLED_APP_GRACE = 1.0  # seconds the apps cancelled at the graceful timeout get to clean up
_WRITE_PIECE = 256 * 1024  # bytes of a file read and written at a time where the loop has no sendfile


async def _send_file(transport, file, offset, size):
    """`size` bytes of `file` from `offset` with `loop.sendfile` (zero-copy `os.sendfile` on
    socket transports that allow it, a read/write loop otherwise). A file that shrank
    since its size was taken fails the response (the connection closes); of one that grew,
    only `size` bytes are sent."""
    if transport is None or transport.is_closing():
        raise _native.ClientDisconnected("the client disconnected")
    loop = asyncio.get_running_loop()
    try:
        sent = await loop.sendfile(transport, file, offset, size)
    except (ConnectionError, BrokenPipeError) as exc:
        raise _native.ClientDisconnected("the client disconnected") from exc
    if sent != size:
        raise RuntimeError(f"the file shrank while it was sent: {sent} of {size} bytes")


async def _pathsend(protocol, transport, path, gen, size):
    """`http.response.pathsend`: the file at `path`, `size` bytes as the head announced."""
    ok = False
    try:
        with open(path, "rb") as f:
            await _send_file(transport, f, 0, size)
        ok = True
    finally:
        protocol._pathsend_done(gen, ok)


async def _write_file(protocol, transport, file, offset, size):
    """`_send_file` for a loop without `sendfile` (uvloop): the file read and written in
    pieces, each once the transport has taken the one before (flow control)."""
    file.seek(offset)
    left = size
    while left:
        if transport is None or transport.is_closing():
            raise _native.ClientDisconnected("the client disconnected")
        data = file.read(min(left, _WRITE_PIECE))
        if not data:
            raise RuntimeError(f"the file shrank while it was sent: {size - left} of {size} bytes")
        transport.write(data)
        left -= len(data)
        drained = protocol._drain()
        if drained is not None:
            await drained


async def _file_body(protocol, transport, file, offset, size, gen, done=None):
    """A file as the body of request `gen`: a WSGI app's `wsgi.file_wrapper` file (`done(ok)`
    lets its thread close the file) or a static file (no `done`: the file is closed here).
    Nobody is there to take an error: it is logged."""
    ok = False
    try:
        if _has_sendfile(asyncio.get_running_loop()):
            await _send_file(transport, file, offset, size)
        else:
            await _write_file(protocol, transport, file, offset, size)
        ok = True
    except _native.ClientDisconnected:
        pass
    except Exception:
        logger.exception("sending a file body failed")
    finally:
        protocol._pathsend_done(gen, ok)
        if done is None:
            file.close()
        else:
            done(ok)


def _has_sendfile(loop):
    return type(loop).sendfile is not asyncio.AbstractEventLoop.sendfile


def _eager_task(loop):
    """Python 3.12+ and no task factory: requests start as eager tasks (this class with
    eager_start=True), whose first step runs at once, so a response that never waits is
    sent in the same callback that read the request. A task factory set by the app (in
    lifespan) is honoured instead."""
    if sys.version_info < (3, 12) or loop.get_task_factory() is not None:
        return None
    return asyncio.Task


class ConnectionFactory:
    """The listeners' protocol factory: a native `HttpProtocol` per connection. When accept
    finds no descriptor free, swordfish's loop asks it to free some: the connections that
    are least use are closed (every idle kept-alive one, then the oldest incomplete heads;
    src/http/shed.rs), so a new client is served during a flood of slow ones instead of
    refused until the header-read timeout frees descriptors. Logged at most every
    `LOG_EVERY` seconds."""

    SHED = 16  # connections closed at least, each time (room for a burst of new clients)
    LOG_EVERY = 10.0

    def __init__(self, state, shared_queue=False, gate=None):
        self.state = state
        # The supervisor's workers: accept only while not over this worker's share of the
        # connections (balance.py), asked by the loop before each accept.
        self.accept_pause = gate.pause if gate is not None else None
        # Where other processes accept from the same queue (workers, gunicorn's workers),
        # one connection per wake-up of the listening socket: every worker's loop is woken
        # for it, so each takes its turn, and a worker busy serving comes back to accept
        # later than an idle one. Taking the whole queue at once, the first worker awake
        # took 3-4 times the connections of the other (docs/design.md, "Workers share
        # connections").
        self.accept_batch = 1 if shared_queue else None
        self.shed = [0, 0]  # idle, heads closed since the last message
        self.next_log = 0.0

    def __call__(self):
        return _native.HttpProtocol(self.state)

    def free_descriptors(self):
        idle, heads = self.state.shed_connections(self.SHED)
        self.shed[0] += idle
        self.shed[1] += heads
        now = time.monotonic()
        if now >= self.next_log and (idle or heads):
            logger.warning("out of file descriptors: closed %d idle and %d incomplete connections "
                           "to take new ones", *self.shed)
            self.shed = [0, 0]
            self.next_log = now + self.LOG_EVERY
        return idle + heads


class Server:
    def __init__(self, config: Config):
        self.config = config
        self.state = None
        self.started = False
        self.exit_code = 0
        self.sockets = []
        self.tls_engine = None  # with TLS: "rustls" or "OpenSSL", whichever serves it
        self._servers = []
        self._exit = None
        self._loop = None
        self._should_exit = False  # shutdown() was called (kept for a serve() not started yet)
        self._retiring = False  # retire() was called: the shutdown drains (see retire())
        self._bound_uds = None  # the Unix socket path this server bound (removed at exit)
        # Hooks (the worker mode of the CLI uses them to talk to its supervisor):
        # on_started() once the sockets listen; on_max_requests() once max_requests
        # (plus this process's jitter) requests have started; None: shut down then.
        self.on_started = None
        self.on_max_requests = None
        self.multiprocess = False  # WSGI's wsgi.multiprocess
        self.supervised = False  # a worker of swordfish's own supervisor
        self.metrics = None  # where this worker counts what it serves (--metrics)
        self.board = None  # (FD, SLOT): this worker's slot of the supervisor's connection board
        self._rsgi_prepared = False  # before_loop() ran (RSGI's __rsgi_init__)
        self._engine = None  # the WSGI thread engine, when it serves (--wsgi-engine threads)

    async def serve(self, sockets=None):
        """Serve until `shutdown()`; sockets: already-bound listening sockets to use. Raises
        `LifespanFailed` if lifespan startup fails and OSError if it cannot listen (both
        logged, with `exit_code` set)."""
        loop = asyncio.get_running_loop()
        self._exit = asyncio.Event()
        # In this order: a shutdown() in another thread either finds _loop (and _exit) set
        # or set _should_exit before it is read here.
        self._loop = loop
        if self._should_exit:
            self._exit.set()
        config = self.config
        app = config.load_app()
        kind = self.interface_of(app)
        wsgi = kind == "wsgi"
        rsgi_hooks = None
        if kind == "rsgi":
            if not self._rsgi_prepared:
                # Served without `run()`: the hooks run here, with the loop running.
                self.before_loop(loop)
                rsgi_hooks = loop
            app = getattr(app, "__rsgi__", app)
        if config.proxy_headers:
            wrapper = {"wsgi": WsgiProxyHeaders, "rsgi": RsgiProxyHeaders}.get(kind, ProxyHeaders)
            app = wrapper(app, config.forwarded_allow_ips)
        lifespan = Lifespan(app, "off" if kind != "asgi" else config.lifespan)
        try:
            await lifespan.startup()
        except LifespanFailed as exc:
            logger.error("%s", exc)
            self.exit_code = 3
            raise
        watch = None
        interface = None
        gate = publish = None
        try:
            if wsgi:
                sendfile = _file_body if _has_sendfile(loop) else None
                interface = _native.WsgiApp(app, loop, environ=environ_template(config, self.multiprocess), threads=config.threads,
                                            logger=logger, sendfile=sendfile)
            elif kind == "rsgi":
                interface = self._rsgi_interface(app, loop)
            else:
                interface = self._asgi_interface(app, loop, lifespan)
            self.state = state = _native.HttpServerState(
                interface,
                loop,
                logger=logger,
                access_log=(access_logger_for(config.access_log_format)
                            if config.access_log and access_logger.isEnabledFor(logging.INFO) else None),
                limit_request_line=config.limit_request_line,
                limit_header_size=config.limit_header_size,
                limit_request_field_size=config.limit_request_field_size,
                limit_header_count=config.limit_header_count,
                limit_body_size=config.limit_body_size,
                limit_concurrency=config.limit_concurrency,
                timeout_header_read=config.timeout_header_read,
                timeout_keep_alive=config.timeout_keep_alive,
                date_header=config.date_header,
                server_header=b"swordfish" if config.server_header else None,
                default_headers=config.default_headers(),
                proxy_protocol=TrustedHosts(config.forwarded_allow_ips).__contains__ if config.proxy_protocol else None,
                metrics=self.metrics,
                static_files=(None if config.static_path_dir is None else
                              (config.static_path_route, config.static_path_dir, config.static_path_expires, _file_body)),
                http2=config.http2_settings(websockets=not wsgi) if config.serves_http2() else None,
            )
            threaded = wsgi and self._threaded()
            if wsgi:
                logger.info("WSGI served by %s", "the thread engine" if threaded else "the loop")
            if self.board is not None:
                board = ConnectionBoard.attach(self.board[0])
                # The engine's connections, and those it moved to the loop (HTTP/2).
                count = ((lambda: self._engine.connections + len(state.connections)) if threaded
                         else (lambda: len(state.connections)))
                gate = AcceptGate(board, self.board[1], count)
            try:
                await self._listen(loop, ConnectionFactory(state, self.multiprocess, gate), sockets,
                                   config.ssl_context(config.serves_http2()), start_serving=not threaded)
                if threaded:
                    # The loop only bound the sockets: the engine's threads accept and serve.
                    for sock in self.sockets:
                        with socket.fromfd(sock.fileno(), sock.family, sock.type) as dup:
                            dup.listen(config.backlog)
                    sslcontext = config.ssl_context(config.serves_http2())
                    handoff = self._handoff(loop, state, sslcontext) if config.serves_http2() else None
                    tls = getattr(sslcontext, "rustls", None)
                    self._engine = _native.WsgiEngine(app, state, self.sockets,
                                                      environ=environ_template(config, self.multiprocess),
                                                      threads=config.threads, logger=logger, board=self.board,
                                                      handoff=handoff, tls=tls)
                    if tls is not None:
                        self.tls_engine = "rustls"  # the engine's, whatever the loop's would be
            except OSError as exc:
                logger.error("%s", exc)
                self.exit_code = 1
                raise
            self.started = True
            if gate is not None:
                # On the board before "serving on": a worker that has not accepted yet
                # counts (0), or the first one awake takes a whole burst.
                publish = loop.create_task(self._publish_connections(gate))
                gate.publish()
            if config.max_requests:
                limit = config.max_requests + random.randint(0, max(0, config.max_requests_jitter or 0))
                watch = loop.create_task(self._watch_requests(limit))
            # The supervisor hears first, so that anyone who has read "serving on" knows
            # the supervisor counts this worker as started.
            if self.on_started is not None:
                self.on_started()
            self._log_listening()
            await self._exit.wait()
        finally:
            if watch is not None:
                watch.cancel()
            if publish is not None:
                publish.cancel()
            if gate is not None:
                gate.withdraw()  # before the listeners close: the others stop waiting on it
            if self._engine is not None:
                await self._shutdown_engine()
            else:
                await self._shutdown_connections()
            if wsgi and interface is not None:
                self._stop_wsgi_threads(interface.close)
            await lifespan.shutdown()
            if rsgi_hooks is not None:
                self.after_loop(rsgi_hooks)

    def _threaded(self):
        """Whether the WSGI thread engine serves (`--wsgi-engine threads`, or `auto` where
        the worker may run on more than one CPU; where it can). Under `auto`, a worker that
        `--worker-cpu-affinity auto` confined to a CPU first takes the supervisor's back."""
        config = self.config
        if config.wsgi_engine == "loop":
            return False
        if config.http == "2" or (config.ssl_certfile is not None and self._engine_tls() is None):
            if config.wsgi_engine == "threads":
                logger.info("the WSGI thread engine serves neither HTTP/2 alone nor TLS by OpenSSL: the loop serves "
                            "instead")
            return False
        if config.wsgi_engine == "auto":
            if config.worker_cpu_affinity == "auto" and self.supervised:
                unpin_to_parent()
            return allowed_cpus() > 1
        return True

    def _engine_tls(self):
        """The rustls configuration the thread engine serves TLS with (None: no TLS, or
        TLS by OpenSSL, which the loop serves; a context that fails to load fails later,
        where the listeners are made)."""
        try:
            context = self.config.ssl_context(self.config.serves_http2())
        except OSError:
            return None
        return getattr(context, "rustls", None)

    def interface_of(self, app):
        """'asgi', 'wsgi' or 'rsgi': the configured interface, or the app's."""
        return self.config.interface if self.config.interface != "auto" else detect_interface(app)

    def before_loop(self, loop):
        """Before the loop runs: an RSGI app's `__rsgi_init__(loop)` (RSGI 1.6: the loop is
        not running, so the app may run it until something completes)."""
        self._rsgi_prepared = True
        app = self.config.load_app()
        if self.interface_of(app) == "rsgi" and hasattr(app, "__rsgi_init__"):
            app.__rsgi_init__(loop)

    def after_loop(self, loop):
        """After the loop stopped: an RSGI app's `__rsgi_del__(loop)`."""
        app = self.config.load_app()
        if self.interface_of(app) == "rsgi" and hasattr(app, "__rsgi_del__"):
            app.__rsgi_del__(loop)

    def _ws_options(self):
        """The WebSocket settings of the asyncio interfaces (ASGI, RSGI)."""
        config = self.config
        return dict(ws=config.ws != "none", ws_max_size=config.ws_max_size, ws_max_queue=config.ws_max_queue,
                    ws_ping_interval=config.ws_ping_interval, ws_ping_timeout=config.ws_ping_timeout,
                    ws_per_message_deflate=config.ws_per_message_deflate)

    def _rsgi_interface(self, app, loop):
        return _native.RsgiApp(
            app,
            loop,
            file_sender=_file_body,
            eager_task=_eager_task(loop),
            **self._ws_options(),
        )

    def _asgi_interface(self, app, loop, lifespan):
        config = self.config
        return _native.AsgiApp(
            app,
            loop,
            pathsend=_pathsend,
            pathsend_supported=_has_sendfile(loop),
            root_path=config.root_path,
            lifespan_state=lifespan.state if lifespan.supported else None,
            eager_task=_eager_task(loop),
            **self._ws_options(),
        )

    @staticmethod
    def _stop_wsgi_threads(stop):
        # The graceful timeout has passed (or every request ended): a thread still in the
        # app is stuck there. It is left behind, and said. `stop(timeout)`: the number.
        stuck = stop(_CANCELLED_APP_GRACE)
        if stuck:
            logger.warning("%d WSGI request(s) still running in the app at shutdown: their threads are left behind",
                           stuck)

    async def _listen(self, loop, factory, sockets, sslcontext, start_serving=True):
        config = self.config
        kw = {"backlog": config.backlog, "start_serving": start_serving}
        if sslcontext is not None:
            # The header-read timeout starts at accept: with TLS, the handshake is its start.
            kw.update(ssl=sslcontext, ssl_handshake_timeout=config.timeout_header_read)
            rustls = getattr(sslcontext, "rustls", None) is not None and isinstance(loop, TlsMixin)
            self.tls_engine = "rustls" if rustls else "OpenSSL"
        if sockets:
            for sock in sockets:
                self._servers.append(await loop.create_server(factory, sock=sock, **kw))
        elif config.fd is not None:
            sock = socket.socket(fileno=config.fd)
            self._servers.append(await loop.create_server(factory, sock=sock, **kw))
        elif config.uds:
            self._servers.append(await loop.create_unix_server(factory, path=config.uds, **kw))
            self._bound_uds = config.uds
        else:
            self._servers.append(await loop.create_server(factory, host=config.host, port=config.port, **kw))
        self.sockets = [s for server in self._servers for s in server.sockets]

    def _log_listening(self):
        scheme = "http" if self.config.ssl_certfile is None else "https"
        tls = f", TLS by {self.tls_engine}" if self.tls_engine else ""
        for sock in self.sockets:
            name = sock.getsockname()
            if isinstance(name, tuple):
                host, port = name[:2]
                host = f"[{host}]" if ":" in host else host
                logger.info("swordfish serving on %s://%s:%d (pid %d%s)", scheme, host, port, os.getpid(), tls)
            else:
                logger.info("swordfish serving on unix:%s (pid %d%s)", name, os.getpid(), tls)

    @staticmethod
    async def _publish_connections(gate):
        # Counts go up on the board as this worker accepts; this brings closed connections
        # in (balance.py: a count left high only makes the others take more).
        while True:
            gate.publish()
            await asyncio.sleep(REFRESH)

    async def _watch_requests(self, limit):
        # Polled (0.05 s) rather than a per-request callback from the native protocol:
        # nothing on the request path pays for it, and max-requests is approximate by
        # nature (the jitter exists so that workers do not all recycle at once).
        state = self.state
        while state.total_requests < limit:
            await asyncio.sleep(0.05)
        logger.info("max requests reached (%d of %d): %s", state.total_requests, limit,
                    "asking for a replacement" if self.on_max_requests else "shutting down")
        if self.on_max_requests is not None:
            self.on_max_requests()
        else:
            self.shutdown()

    def shutdown(self):
        """Ask `serve()` to stop gracefully (safe from any thread). Asked before `serve()`
        has started (or during lifespan startup) it is kept, as uvicorn's `should_exit`
        set early: `serve()` starts up as usual (lifespan startup, listening, on_started)
        and then at once shuts down gracefully and returns."""
        self._should_exit = True
        loop = self._loop
        if loop is None:
            return  # serve() sees _should_exit
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._exit.set()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self._exit.set)

    def retire(self):
        """`shutdown()` for a worker that another replaces (a reload, max-requests, fewer
        workers): kept-alive connections are drained rather than closed. Each closes only
        after a response that said `connection: close`, so a request its client sends
        meanwhile is answered (an idle one closes at its keep-alive timeout if no request
        comes); WebSockets close with 1012 (service restart) instead of 1001, telling the
        client to reconnect at once. --timeout-graceful-shutdown still bounds it all."""
        self._retiring = True
        self.shutdown()

    async def _shutdown_connections(self):
        state = self.state
        for server in self._servers:
            server.close()
        if state is None:
            return
        # Connections already accepted (the loop accepts in batches) and requests already
        # in the socket buffers reach the protocol over the next few loop iterations: let
        # them, so that they are served rather than closed as idle. This matters when a
        # worker retires under load (--max-requests): the connections it took from the
        # shared accept queue are the ones a client sees dropped otherwise.
        for _ in range(_DRAIN_ITERATIONS):
            await asyncio.sleep(0)
        state.begin_shutdown(self._retiring)
        for conn in list(state.connections):
            conn.shutdown()
        self._log_retiring(len(state.connections))
        timeout = self.config.timeout_graceful_shutdown
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        # Polled: the connections tell nobody when they go; shutdown is rare.
        while state.connections or state.active_requests:
            if deadline is not None and loop.time() >= deadline:
                logger.warning("graceful shutdown timed out: closing %d connections", len(state.connections))
                tasks = []
                for conn in list(state.connections):
                    tasks += conn.cancel_tasks()
                    conn.abort()
                await self._reap_cancelled(tasks)
                break
            await asyncio.sleep(0.02)
        await self._close_servers()

    async def _shutdown_engine(self):
        """`_shutdown_connections` for the WSGI thread engine: its listeners close, its
        idle connections close, and its busy ones after their response, within
        --timeout-graceful-shutdown; then its threads stop."""
        engine, state = self._engine, self.state
        engine.close_listeners()
        for server in self._servers:
            server.close()
        state.begin_shutdown(self._retiring)
        timeout = self.config.timeout_graceful_shutdown
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        # Polled, as on the loop's path; a connection busy at one look is shut down at the
        # next. The connections the engine moved to the loop (HTTP/2) are the loop's.
        engine.shutdown()
        for conn in list(state.connections):
            conn.shutdown()
        self._log_retiring(engine.connections + len(state.connections))
        while engine.connections or state.connections or state.active_requests:
            if deadline is not None and loop.time() >= deadline:
                logger.warning("graceful shutdown timed out: closing %d connections",
                               engine.connections + len(state.connections))
                engine.abort()
                for conn in list(state.connections):
                    conn.abort()
                break
            await asyncio.sleep(0.02)
            engine.shutdown()
        self._stop_wsgi_threads(engine.stop)
        await self._close_servers()

    def _handoff(self, loop, state, sslcontext):
        """The WSGI thread engine's `handoff(fd, data)`: a connection that opened with
        HTTP/2's preface, or asked for `Upgrade: h2c`, is served on the loop, which serves
        HTTP/2 (the engine serves HTTP/1.1), by a protocol that reads what the engine read
        first. Over TLS, one whose ClientHello offers `h2`, before anything of it is read:
        the loop's TLS takes it from the start. Called on an engine thread; the connection
        is made on the loop's."""
        tls = {} if sslcontext is None else {"ssl": sslcontext,
                                             "ssl_handshake_timeout": self.config.timeout_header_read}

        def adopt(fd, data):
            sock = socket.socket(fileno=fd)
            try:
                task = loop.create_task(loop.connect_accepted_socket(lambda: _native.HttpProtocol(state, data), sock,
                                                                     **tls))
            except BaseException:
                sock.close()
                raise
            # A client gone before the transport was made: nothing to serve.
            task.add_done_callback(lambda t: t.cancelled() or t.exception() is None or sock.close())

        def handoff(fd, data):
            loop.call_soon_threadsafe(adopt, fd, data)

        return handoff

    def _log_retiring(self, connections):
        if self._retiring:
            logger.info("retiring (pid %d): draining %d connections", os.getpid(), connections)

    async def _close_servers(self):
        for server in self._servers:
            await server.wait_closed()
        if self._bound_uds:
            try:
                os.unlink(self._bound_uds)
            except OSError:
                pass

    @staticmethod
    async def _reap_cancelled(tasks):
        # The apps' clean-up (finally blocks, context managers) runs now; an app that
        # ignores the cancellation is left behind after a bounded wait, not waited for.
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=_CANCELLED_APP_GRACE)
        if pending:
            logger.warning("%d app task(s) still running after cancellation", len(pending))


def _notify(fd, message):
    try:
        os.write(fd, message)
    except (BlockingIOError, BrokenPipeError):
        pass  # a supervisor that does not read now is told by the next heartbeat, or gone


def _reopen_logs():
    logger.info("SIGUSR1: reopened %d log file(s)", reopen_files())


def _heartbeat(loop, fd, interval):
    """`H` to the supervisor every `interval` seconds, from the loop: a loop stuck in a
    blocking call stops it, and the supervisor replaces the worker."""
    def beat():
        _notify(fd, b"H")
        loop.call_later(interval, beat)

    beat()


def run(config: Config, notify_fd=None, metrics=None, board=None):
    """Run a server on a new loop of the configured kind until SIGINT/SIGTERM; returns
    the exit code. notify_fd: a worker's pipe to its supervisor (see supervisor.py);
    metrics: its slot of the supervisor's counters, (FD, SLOT) (see metrics.py); board:
    its slot of the supervisor's connection board, (FD, SLOT) (see balance.py)."""
    _native.tune_allocator()
    loop = config.new_event_loop()
    asyncio.set_event_loop(loop)
    server = Server(config)
    if notify_fd is not None:
        # A supervisor's worker: other processes serve the same app (with --reload too,
        # while a replacement starts).
        server.multiprocess = server.supervised = True
        os.set_blocking(notify_fd, False)  # the loop never waits on the supervisor
        server.on_started = lambda: _notify(notify_fd, b"R")
        server.on_max_requests = lambda: _notify(notify_fd, b"M")
        if config.timeout_worker_healthcheck is not None:
            _heartbeat(loop, notify_fd, config.timeout_worker_healthcheck / 4)
    if metrics is not None:
        server.metrics = _native.MetricsSlot(*metrics)
    server.board = board
    handlers = {signal.SIGINT: server.shutdown, signal.SIGTERM: server.shutdown, signal.SIGUSR1: _reopen_logs}
    if notify_fd is not None:
        # The supervisor's word that another worker takes over (see supervisor.py).
        handlers[signal.SIGUSR2] = server.retire
    signals = tuple(handlers)
    for sig, handler in handlers.items():
        try:
            loop.add_signal_handler(sig, handler)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        server.before_loop(loop)
        loop.run_until_complete(server.serve())
    except (LifespanFailed, OSError):
        if not server.exit_code:  # not a failure serve() logged
            raise
    finally:
        for sig in signals:
            try:
                loop.remove_signal_handler(sig)
            except Exception:
                pass
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            if server._rsgi_prepared:
                server.after_loop(loop)
        finally:
            asyncio.set_event_loop(None)
            loop.close()
    return server.exit_code


def serve(app, host="127.0.0.1", port=8000, **options):
    """Serve `app` (an ASGI, WSGI or RSGI app, or 'module:attribute') until SIGINT/SIGTERM, as `swordfish
    serve` does; returns the exit code. `log_level` sets the level of the server's log;
    `workers=N` (N > 1) runs a supervisor and N worker processes, each of which imports the
    app: it must be given as 'module:attribute' (with `app_dir` if its module is not in the
    current directory)."""
    from .cli import start

    return start(Config(app, host=host, port=port, **options))
