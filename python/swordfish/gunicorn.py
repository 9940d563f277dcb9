"""A gunicorn worker class, for teams whose process manager is gunicorn:

    gunicorn -k swordfish.gunicorn.Worker module:app
    gunicorn -k swordfish.gunicorn.ThreadWorker module:app   # WSGI on the thread engine always

gunicorn's arbiter binds the sockets, forks the workers and watches them; each worker
serves the app (ASGI or WSGI, told apart as `--interface auto` does) with swordfish's
server on a swordfish loop. gunicorn's settings that have a swordfish counterpart are
honoured: the sockets (`--bind`, `--backlog`), `--keep-alive`, `--graceful-timeout`,
`--max-requests` (with its jitter), `--limit-request-line`, `--limit-request-fields`,
`--limit-request-field-size`, `--forwarded-allow-ips`, `--threads` (a WSGI app's threads,
when set above 1), the TLS options, `--access-logfile` with `--access-log-format` (the same
atoms), `--log-level` and the error log, and (gunicorn 25+) HTTP/2: `--http-protocols`
(`h2` served by ALPN over TLS), `--http2-cleartext` (h2c; swordfish takes both the preface
and `Upgrade: h2c` when either is asked for, and a WSGI app is then served on the loop, as
the thread engine serves HTTP/1.1 only), `--http2-max-concurrent-streams`,
`--http2-initial-window-size`, `--http2-max-frame-size` and `--http2-max-header-list-size`. The worker answers the arbiter's heartbeat from
its loop every `--timeout` / 2 seconds, so a worker whose loop is stuck is killed and
replaced; SIGTERM stops it gracefully, SIGINT and SIGQUIT at once, SIGUSR1 reopens the log
files, and a worker whose arbiter went away stops. A WSGI app is served as `--wsgi-engine
auto` serves it (docs/server.md): on the thread engine, without the loop's hand-off per
request and with its I/O off the GIL, where the worker may run on more than one CPU, and on
the loop where it is confined to one; `ThreadWorker` serves it on the thread engine always.
"""

import asyncio
import logging
import os
import signal
import ssl
import sys

from gunicorn.arbiter import Arbiter
from gunicorn.workers.base import Worker as _GunicornWorker

from .server import Config, Server
from .server.lifespan import LifespanFailed

CERT_REQS = {ssl.CERT_NONE: "none", ssl.CERT_OPTIONAL: "optional", ssl.CERT_REQUIRED: "required"}
# gunicorn's 0 means no limit; swordfish's limits are sizes.
UNLIMITED = 1 << 20


def _limit(value):
    return value if value > 0 else UNLIMITED


def _http2(cfg):
    """gunicorn's HTTP/2 settings (25+; none before) as swordfish's: `--http` and the
    `--http2-*` options, and whether h2c is asked for."""
    protocols = set(getattr(cfg, "http_protocols", None) or ["h1"])
    cleartext = getattr(cfg, "http2_cleartext", "off") != "off"
    if "h2" not in protocols or not (cfg.is_ssl or cleartext):
        return {"http": "1"}, False
    return {
        "http": "auto" if "h1" in protocols else "2",
        "http2_max_concurrent_streams": cfg.http2_max_concurrent_streams,
        "http2_initial_stream_window_size": cfg.http2_initial_window_size,
        "http2_max_frame_size": cfg.http2_max_frame_size,
        "http2_max_headers_size": _limit(cfg.http2_max_header_list_size),
    }, cleartext and not cfg.is_ssl


class Worker(_GunicornWorker):
    # Extra swordfish settings for every worker, in a subclass: CONFIG = {"ws_max_size": ...}.
    CONFIG = {}

    def _route_logs(self):
        """swordfish's loggers write where gunicorn's do, at its levels (in the worker: the
        arbiter's own loggers are left alone)."""
        for name, source in (("swordfish.error", self.log.error_log), ("swordfish.wsgi", self.log.error_log),
                             ("swordfish.access", self.log.access_log)):
            target = logging.getLogger(name)
            target.handlers = source.handlers
            target.setLevel(source.level)
            target.propagate = False

    def config(self):
        """The swordfish `Config` of gunicorn's settings."""
        cfg = self.cfg
        options = {
            "timeout_keep_alive": cfg.keepalive,
            "timeout_graceful_shutdown": cfg.graceful_timeout,
            "max_requests": self.max_requests if cfg.max_requests > 0 else None,
            "limit_request_line": _limit(cfg.limit_request_line),
            "limit_header_count": _limit(cfg.limit_request_fields),
            "limit_request_field_size": _limit(cfg.limit_request_field_size),
            "proxy_headers": True,
            "forwarded_allow_ips": ",".join(cfg.forwarded_allow_ips),
            "backlog": cfg.backlog,
            "access_log": cfg.accesslog is not None,
            "access_log_format": cfg.access_log_format,
            "log_level": logging.getLevelName(self.log.error_log.getEffectiveLevel()).lower(),
        }
        if cfg.threads > 1:
            options["threads"] = cfg.threads
        if cfg.is_ssl:
            options.update(ssl_certfile=cfg.certfile, ssl_keyfile=cfg.keyfile, ssl_ca_certs=cfg.ca_certs,
                           ssl_cert_reqs=CERT_REQS.get(cfg.cert_reqs, "none"), ssl_ciphers=cfg.ciphers)
        if options["log_level"] not in ("critical", "error", "warning", "info", "debug"):
            options["log_level"] = "info"
        http2, h2c = _http2(cfg)
        options.update(http2)
        if h2c:
            options["wsgi_engine"] = "loop"  # ThreadWorker's CONFIG says otherwise
        return Config(self.wsgi, **{**options, **self.CONFIG})

    def init_signals(self):
        # The loop takes SIGTERM, SIGINT and SIGQUIT; gunicorn's wake-up pipe is not used.
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, self.handle_usr1)
        signal.signal(signal.SIGABRT, self.handle_abort)  # the arbiter's timeout: exit now
        signal.siginterrupt(signal.SIGUSR1, False)

    def run(self):
        self._route_logs()
        config = self.config()
        loop = config.new_event_loop()
        asyncio.set_event_loop(loop)
        server = Server(config)
        server.multiprocess = self.cfg.workers > 1
        server.on_started = lambda: self.log.info("swordfish worker serving (pid %d)", os.getpid())

        def stop_now():
            config.timeout_graceful_shutdown = 0
            server.shutdown()

        loop.add_signal_handler(signal.SIGTERM, server.shutdown)
        loop.add_signal_handler(signal.SIGINT, stop_now)
        loop.add_signal_handler(signal.SIGQUIT, stop_now)
        heartbeat = loop.create_task(self._heartbeat(server))
        try:
            server.before_loop(loop)
            loop.run_until_complete(server.serve(sockets=[s.sock for s in self.sockets]))
        except (LifespanFailed, OSError):
            # Told to the arbiter as a boot failure, as uvicorn's worker does.
            sys.exit(Arbiter.WORKER_BOOT_ERROR)
        else:
            heartbeat.cancel()
            loop.run_until_complete(asyncio.gather(heartbeat, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            server.after_loop(loop)
        finally:
            # After an abort (the arbiter's timeout) the loop is not run again: it would
            # accept connections only to drop them.
            asyncio.set_event_loop(None)
            loop.close()
        if server.exit_code:
            sys.exit(server.exit_code)

    async def _heartbeat(self, server):
        """Tell the arbiter this worker's loop runs; stop if the arbiter is gone."""
        interval = self.timeout / 2 if self.timeout else 1.0
        while True:
            self.notify()
            if self.ppid != os.getppid():
                self.log.info("parent changed, shutting down: %s", self)
                server.shutdown()
                return
            await asyncio.sleep(interval)


class ThreadWorker(Worker):
    """`Worker` with a WSGI app served on the thread engine (`--wsgi-engine threads`)."""

    CONFIG = {"wsgi_engine": "threads"}
