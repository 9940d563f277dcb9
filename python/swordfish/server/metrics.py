"""`--metrics`: the supervisor's Prometheus endpoint, over what its workers count.

Each worker counts what it serves in its own slot of a shared memory file (the native
`MetricsSlot`; recording is a few relaxed atomic adds on the request path). The supervisor
makes the file (a memfd every worker inherits), gives each new worker a free slot, and on a
scrape sums the slots of the live workers with what the exited ones had counted. A slot is
reused once its worker has exited and its counts are kept: so counters never go back
(Prometheus reads a drop as a restart) and gauges (open connections) start from zero again.
The endpoint runs on a thread of the supervisor: it answers while workers restart or hang.
"""

import http.server
import logging
import os
import socket
import threading

from .. import _native

logger = logging.getLogger("swordfish.error")

CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
LISTS = ("responses", "duration")  # by status class, by duration bucket
# Counted over a worker's life: what an exited worker counted is kept.
COUNTERS = LISTS + ("bytes_received", "bytes_sent", "connections_total", "upgraded_total", "duration_sum")
GAUGES = ("connections_open", "upgraded_open")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus's text format


def _zero():
    return {"responses": [0] * len(CLASSES), "duration": [0] * (len(_native.METRICS_DURATION_BUCKETS) + 1),
            **{name: 0 for name in COUNTERS + GAUGES if name not in LISTS}}


def _add(total, snapshot, names):
    for name in names:
        if name in LISTS:
            total[name] = [a + b for a, b in zip(total[name], snapshot[name])]
        else:
            total[name] += snapshot[name]


class WorkerCounters:
    """The shared memory file and its slots, one per live worker. Thread-safe: the
    supervisor's loop hands slots out and takes them back while the endpoint reads."""

    def __init__(self):
        self.fd = os.memfd_create("swordfish-metrics", os.MFD_CLOEXEC)
        self.stride = _native.MetricsSlot.stride()
        self.size = 0  # slots the file holds
        self.live = {}  # slot index -> MetricsSlot
        self.exited = _zero()  # what the workers that exited counted
        self.started = 0  # workers ever started
        self._lock = threading.Lock()

    def allocate(self):
        """A free slot's index for a new worker (its counters at zero)."""
        with self._lock:
            index = next(i for i in range(len(self.live) + 1) if i not in self.live)
            if index >= self.size:
                # Grown, never shrunk: a worker's mapping past the end would fault.
                self.size = max(4, 2 * self.size, index + 1)
                os.ftruncate(self.fd, self.size * self.stride)
            self.live[index] = _native.MetricsSlot(self.fd, index)
            self.started += 1
            return index

    def release(self, index):
        """The worker of slot `index` has exited: keep its counts, free its slot."""
        with self._lock:
            slot = self.live.pop(index, None)
            if slot is not None:
                _add(self.exited, slot.snapshot(), COUNTERS)
                slot.clear()

    def totals(self):
        with self._lock:
            total = _zero()
            _add(total, self.exited, COUNTERS)
            for slot in self.live.values():
                _add(total, slot.snapshot(), COUNTERS + GAUGES)
            return total

    def close(self):
        os.close(self.fd)


def render(total, workers, restarts):
    """The Prometheus text exposition of the totals."""
    lines = []

    def metric(name, kind, help_text, samples):
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lines.append(f"{name}{labels} {value}")

    metric("swordfish_http_requests_total", "counter", "HTTP responses, by status class (refused requests included).",
           [(f'{{status="{c}"}}', n) for c, n in zip(CLASSES, total["responses"])])
    name = "swordfish_http_request_duration_seconds"
    lines.append(f"# HELP {name} From a request's complete head to the end of its response.")
    lines.append(f"# TYPE {name} histogram")
    cumulated = 0
    for bound, n in zip([*_native.METRICS_DURATION_BUCKETS, "+Inf"], total["duration"]):
        cumulated += n
        lines.append(f'{name}_bucket{{le="{bound}"}} {cumulated}')
    lines.append(f"{name}_sum {total['duration_sum']!r}")
    lines.append(f"{name}_count {cumulated}")
    metric("swordfish_http_connections", "gauge", "Open client connections (WebSocket ones included).",
           [("", total["connections_open"])])
    metric("swordfish_http_connections_total", "counter", "Client connections accepted.",
           [("", total["connections_total"])])
    metric("swordfish_websocket_connections", "gauge", "Open WebSocket connections.",
           [("", total["upgraded_open"])])
    metric("swordfish_websocket_connections_total", "counter", "WebSocket connections accepted.",
           [("", total["upgraded_total"])])
    metric("swordfish_http_received_bytes_total", "counter",
           "Bytes read from HTTP clients (WebSocket frames not included).", [("", total["bytes_received"])])
    metric("swordfish_http_sent_bytes_total", "counter",
           "Bytes of HTTP responses written (WebSocket frames not included).", [("", total["bytes_sent"])])
    metric("swordfish_workers", "gauge", "Worker processes serving.", [("", workers)])
    metric("swordfish_worker_restarts_total", "counter",
           "Workers started to replace another (died, killed, recycled or reloaded).", [("", restarts)])
    return "\n".join(lines) + "\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    timeout = 10  # seconds a scraper may take to send its request
    server_version = "swordfish"

    def do_GET(self):
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404)
            return
        body = self.server.body().encode()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, format, *args):
        logger.debug("metrics: %s", format % args)


class MetricsEndpoint(http.server.ThreadingHTTPServer):
    """`GET /metrics` on `address:port`, answered with `body()`, on a daemon thread."""

    daemon_threads = True

    def __init__(self, address, port, body):
        self.address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.body = body
        super().__init__((address, port), _Handler)
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self.serve_forever, name="swordfish-metrics", daemon=True)
        self._thread.start()
        host, port = self.server_address[:2]
        logger.info("metrics on http://%s:%d/metrics", f"[{host}]" if ":" in host else host, port)

    def stop(self):
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
        self.server_close()
