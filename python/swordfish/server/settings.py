"""The server's settings, each declared once: its name (a `Config` attribute and a keyword of
`swordfish.serve`), its `swordfish serve` flag and `SWORDFISH_*` variable, its type, bounds or
choices, default and help. `Config` (config.py), the command line and a supervisor's worker
command line (cli.py) and the options table of docs/server.md are all made from `SETTINGS`.

    python -m swordfish.server.settings --markdown              # print the options table
    python -m swordfish.server.settings --update docs/server.md   # rewrite it there, between the markers
"""

import dataclasses
import re
import sys

from .logs import ATOM_HELP, check_format

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
# --ssl-cert-reqs: whether clients are asked for a certificate, and must present one.
CERT_REQS = ("none", "optional", "required")
SSL_ENGINES = ("auto", "rustls", "openssl")
TRUE_TEXTS = ("1", "true", "yes", "on")  # a bool's variable is true spelled so, false otherwise
_SAME = object()  # Setting.cli_default: the same as default


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting of the server, and how each place that has it spells it."""

    name: str  # the Config attribute
    kind: type  # bool, int, float, str, or list: a repeatable option, a list of str
    default: object
    help: str  # for --help and the options table
    choices: tuple = ()
    # Numbers: the least value and whether it is allowed itself, the most value.
    least: float | None = None
    least_allowed: bool = True
    most: float | None = None
    # A number that may be None (no limit, off) spells None so on the command line; in
    # Config, inf is taken as None too.
    none_as: str | None = None
    flag: str = ""  # the option; by default `--` and the name with `-` for `_`
    metavar: str = ""  # the value's name in --help and the options table; by default N for an int, SECONDS for a float
    # The command line's default where it differs from Config's (the CLI looks for the app
    # in the current directory; Config leaves sys.path alone).
    cli_default: object = _SAME
    supervisor_only: bool = False  # a supervisor's workers never get it
    secret: bool = False  # workers get it in their environment, out of the process list
    normalise: object = None  # value -> the value Config keeps
    item_texts: object = None  # list kind: the list -> its items as the command line spells them
    doc: str = ""  # the options table's further words
    shown_default: str | None = None  # the options table's default column, where the value says too little

    def __post_init__(self):
        if not self.flag:
            object.__setattr__(self, "flag", "--" + self.name.replace("_", "-"))
        if not self.metavar:
            metavar = {int: "N", float: "SECONDS"}.get(self.kind) or self.flag[2:].upper().replace("-", "_")
            object.__setattr__(self, "metavar", metavar)
        if self.cli_default is _SAME:
            object.__setattr__(self, "cli_default", [] if self.kind is list else self.default)

    @property
    def env(self):
        """The SWORDFISH_* variable (named after the flag: SWORDFISH_HEADER for --header)."""
        return "SWORDFISH_" + self.flag[2:].upper().replace("-", "_")

    @property
    def help_text(self):
        return f"{self.help}; repeatable" if self.kind is list else self.help

    def field(self):
        """(name, type, field) for dataclasses.make_dataclass."""
        if self.kind is list:
            return self.name, list, dataclasses.field(default_factory=list)
        nullable = self.default is None or self.none_as is not None
        return self.name, self.kind | None if nullable else self.kind, dataclasses.field(default=self.default)

    def normalised(self, value):
        if self.none_as is not None and value == float("inf"):
            return None
        return self.normalise(value) if self.normalise is not None else value

    def check(self, value):
        """Why `value` is not allowed, or None if it is."""
        if self.choices:
            if value not in self.choices:
                return f"must be one of {', '.join(self.choices)}, not {value!r}"
            return None
        if value is None or self.least is None:
            return None
        low_ok = value >= self.least if self.least_allowed else value > self.least
        if low_ok and (self.most is None or value <= self.most):  # NaN fails both
            return None
        bound = f"at least {self.least}" if self.least_allowed else f"more than {self.least}"
        if self.most is not None:
            bound += f" and at most {self.most}"
        return f"must be {bound}, not {value!r}"

    def parse(self, text):
        """The value a command line or variable text spells (not for a list: its items are
        taken as they are); ValueError, with the reason, for text that is no allowed value."""
        if self.kind is bool:
            return text.strip().lower() in TRUE_TEXTS
        if self.choices:
            if text not in self.choices:
                raise ValueError(f"invalid choice: {text!r} (choose from {', '.join(self.choices)})")
            return text
        if self.none_as is not None and text.strip().lower() == self.none_as:
            return None
        try:
            value = self.kind(text)
        except ValueError:
            raise ValueError(f"invalid {self.kind.__name__} value: {text!r}") from None
        why = self.check(value)
        if why:
            raise ValueError(why)
        return value

    def argv(self, value):
        """The command line arguments that give this setting `value`."""
        if self.kind is bool:
            return [self.flag if value else "--no-" + self.flag[2:]]
        if self.kind is list:
            items = self.item_texts(value) if self.item_texts else [str(v) for v in value]
            return [f"{self.flag}={item}" for item in items]
        if value is None:
            return [f"{self.flag}={self.none_as}"] if self.none_as is not None else []
        if isinstance(value, (list, tuple)):  # forwarded_allow_ips as a list
            value = ",".join(value)
        return [f"{self.flag}={value}"]


def parse_headers(headers):
    """Default response headers, each 'name: value' or a (name, value) pair, as (name,
    value) bytes pairs with the name in lower case."""
    pairs = []
    for h in headers:
        if isinstance(h, str):
            name, sep, value = h.partition(":")
            if not sep:
                raise ValueError(f"header must be 'name: value', not {h!r}")
            h = (name.strip(), value.strip())
        name, value = h
        pairs.append((_bytes(name).lower(), _bytes(value)))
    return pairs


def _header_texts(headers):
    return [f"{name.decode('latin-1')}: {value.decode('latin-1')}" for name, value in parse_headers(headers)]


def _bytes(v):
    return v.encode("latin-1") if isinstance(v, str) else bytes(v)


def _lower(value):
    return str(value).lower()


def _access_format(value):
    return None if value is None else check_format(value)


def _route(value):
    if not value.startswith("/"):
        raise ValueError(f"invalid static path route {value!r}: it must begin with '/'")
    return value.rstrip("/") or "/"


S = Setting
# In Config's field order (after `app`), which is also that of --help and the options table.
SETTINGS = [
    S("host", str, "127.0.0.1", "bind to this address"),
    S("port", int, 8000, "bind to this TCP port", least=0, most=65535, metavar="PORT"),
    S("uds", str, None, "bind to this Unix socket path", metavar="PATH", doc="removed at exit"),
    S("fd", int, None, "serve on this inherited, already-listening socket descriptor", least=0, metavar="FD",
      doc="a socket systemd passes (socket activation: `LISTEN_FDS`, `LISTEN_PID`) is taken as this one"),
    S("factory", bool, False, "APP is a factory: call it to get the app"),
    S("interface", str, "auto", "the app's interface (auto: an object with `__rsgi__`, or an `async def` app taking "
      "(scope, protocol), is RSGI; any other `async def` app or `__call__` ASGI; any other callable that takes two "
      "arguments WSGI)", choices=("auto", "asgi", "wsgi", "rsgi"),
      doc="looked through partials and decorators; a callable that takes three arguments but not two is ASGI, "
          "and one that takes neither is served as ASGI, with a warning. RSGI is granian's interface (version 1.6): "
          "an RSGI app gets no lifespan, and its `__rsgi_init__(loop)` and `__rsgi_del__(loop)` are called before "
          "the loop runs and after it stops"),
    S("threads", int, 256, "WSGI: the most threads the app runs on (never the loop's)", least=1,
      doc="the thread engine starts them all at once (an idle one waits its turn to poll); on the loop "
          "they are started as needed: a waiting request gets another thread only when none is serving or "
          "the process leaves part of a CPU idle (the threads serving are blocked, not busy); a WSGI app "
          "gets no lifespan"),
    S("wsgi_engine", str, "auto", "WSGI: how requests are served: by threads that each read a request, run its "
      "app and write its answer, with the socket I/O off the GIL and no hand-off between threads (threads); "
      "on the event loop, with the app on threads (loop); or threads where a worker may run on more than one "
      "CPU and the loop where it is confined to one (auto)", choices=("auto", "threads", "loop"),
      doc="`threads` serves TCP and Unix sockets, TLS by rustls, PROXY headers and static files; with TLS by "
          "OpenSSL or `--http 2` the loop serves. `--threads` is the size of its pool, and still the most "
          "app calls at once. On one CPU the loop answers as many requests and sooner (p99 3.5 ms against 6-14 ms), as no other CPU "
          "can do the I/O beside the app; a worker that `--worker-cpu-affinity auto` confined to a CPU "
          "takes back the supervisor's CPUs when its app is WSGI on threads"),
    S("env_file", str, None, "load the app's environment variables from this dotenv file (KEY=VALUE lines)",
      metavar="FILE", supervisor_only=True,
      doc="read with python-dotenv (`pip install 'swordfish[dotenv]'`) before the app is imported; a "
          "variable already set keeps its value; swordfish's own `SWORDFISH_*` settings are not taken "
          "from it (the workers inherit it from the supervisor)"),
    S("pid_file", str, None, "write the server's process id to this file (the supervisor's, with workers)",
      metavar="FILE", supervisor_only=True, doc="removed at exit"),
    S("app_dir", str, None, "look for APP's module in this directory", cli_default=".", metavar="DIR"),
    S("root_path", str, "", "the mount point behind a proxy that strips it: ASGI's root_path (also "
      "prefixed to each request's path and raw_path), WSGI's SCRIPT_NAME", metavar="PATH"),
    S("lifespan", str, "auto", "ASGI lifespan protocol (a WSGI app has none)", choices=("auto", "on", "off"),
      doc="the app's `state` is copied into each request's scope"),
    S("loop", str, "swordfish", "event loop", choices=("swordfish", "asyncio", "uvloop")),
    S("http", str, "auto", "HTTP versions served: HTTP/1.1 and HTTP/2 (auto), HTTP/1.1 only (1) or HTTP/2 "
      "only (2)", choices=("auto", "1", "2"),
      doc="HTTP/2 over TLS is chosen by ALPN (`h2` offered before `http/1.1`); on a cleartext port by the "
          "client's connection preface (h2c with prior knowledge, after a PROXY header too) or by "
          "`Upgrade: h2c`. Every interface is served HTTP/2 on the loop; the WSGI thread engine serves "
          "HTTP/1.1, and moves a connection that opens with the preface or asks for `Upgrade: h2c` to the "
          "loop (`--http 2` has the loop serve WSGI)"),
    S("http2_max_concurrent_streams", int, 200, "HTTP/2: most streams a client may have open at once",
      least=1, most=2**31 - 1, doc="SETTINGS_MAX_CONCURRENT_STREAMS; each stream is a request, counted by "
      "`--limit-concurrency`"),
    S("http2_initial_stream_window_size", int, 1024 * 1024, "HTTP/2: a stream's receive window in bytes",
      least=1, most=2**31 - 1, doc="how much of a request body the client may send before the app reads it"),
    S("http2_initial_connection_window_size", int, 1024 * 1024,
      "HTTP/2: the connection's receive window in bytes", least=65535, most=2**31 - 1),
    S("http2_max_frame_size", int, 16384, "HTTP/2: largest frame payload a client may send, in bytes",
      least=16384, most=2**24 - 1),
    S("http2_max_headers_size", int, 32768, "HTTP/2: largest header list a client may send, in bytes "
      "(decoded, with 32 bytes per field as RFC 9113 counts it)", least=1,
      doc="SETTINGS_MAX_HEADER_LIST_SIZE; a larger one is refused with 431, as `--limit-header-size` "
          "refuses an HTTP/1.1 head"),
    S("http2_max_send_buffer_size", int, 400 * 1024, "HTTP/2: response bytes a stream may have queued "
      "before its app's send waits", least=1),
    S("http2_keep_alive_interval", float, None, "HTTP/2: seconds between PINGs to a client whose connection "
      "is open", least=0, least_allowed=False, none_as="off", shown_default="off"),
    S("http2_keep_alive_timeout", float, 20.0, "HTTP/2: seconds a PING's answer may take before the "
      "connection is closed", least=0, least_allowed=False),
    S("http2_stall_timeout", float, 60.0, "HTTP/2: seconds a stream's response may wait on the client, "
      "with no byte sent, before the stream is reset", least=0, least_allowed=False, none_as="off",
      doc="a stream whose window stays closed is reset (CANCEL) and its app hears that the client went "
          "away; a connection whose client reads nothing from its socket for as long is closed; a "
          "response that waits holds no more than `--http2-max-send-buffer-size`; as nginx's "
          "`send_timeout`"),
    S("access_log", bool, True, "one log line per request", doc="refused requests included"),
    S("access_log_format", str, None, "the access log line in gunicorn's atoms, e.g. "
      "'%(h)s \"%(r)s\" %(s)s %(b)s %(M)sms \"%(a)s\"'", metavar="FORMAT", normalise=_access_format,
      shown_default="`client - \"request line\" status size duration`",
      doc="the atoms: " + ATOM_HELP + "; logged on `swordfish.access`"),
    S("log_level", str, "info", "log level", choices=LOG_LEVELS, normalise=_lower,
      doc="of the `swordfish` loggers (`swordfish.error`, `swordfish.access`, `swordfish.wsgi`); "
          "not applied with `--log-config`"),
    S("log_config", str, None, "configure logging from this file: a `logging.config.dictConfig` "
      "dictionary in JSON (.json) or YAML (.yaml, .yml), else a `fileConfig` INI file", metavar="FILE",
      doc="instead of swordfish's own setup; YAML needs PyYAML"),
    S("backlog", int, 2048, "listen backlog", least=0),
    S("limit_concurrency", int, None, "most requests served at once (then 503)", least=1, shown_default="no limit"),
    S("limit_request_line", int, 8190, "longest request line in bytes (then 414)", least=1),
    S("limit_header_size", int, 32768, "largest header section in bytes (then 431)", least=1),
    S("limit_request_field_size", int, 8190, "longest header field line in bytes, name and value (then 431)",
      least=1, doc="as gunicorn's option of that name and nginx's `large_client_header_buffers`"),
    S("limit_header_count", int, 100, "most header fields (then 431)", least=1),
    S("limit_body_size", int, None, "largest request body in bytes (then 413)", least=0, shown_default="no limit"),
    S("timeout_header_read", float, 10.0, "seconds from accept to a complete request head",
      least=0, least_allowed=False, doc="the TLS handshake counts against it"),
    S("timeout_keep_alive", float, 5.0, "seconds an idle kept-alive connection stays open", least=0),
    S("timeout_graceful_shutdown", float, 30.0, "seconds in-flight requests get on shutdown (inf: no limit)",
      least=0, none_as="inf",
      doc="then the apps still running are cancelled and get a second to clean up"),
    S("server_header", bool, True, "send 'server: swordfish'"),
    S("date_header", bool, True, "send 'date'"),
    S("headers", list, [], "a default response header 'name: value'", flag="--header", metavar="HEADER",
      item_texts=_header_texts,
      doc="one named `server` replaces the built-in one; a header the app sets replaces a default"),
    S("static_path_dir", str, None, "serve the files of this directory under --static-path-route, before the app",
      metavar="DIR", shown_default="off",
      doc="GET and HEAD with conditional requests and single ranges, a large file with `sendfile`; the app "
          "never sees these requests, whatever the answer (404 for anything that is not a regular file inside "
          "the directory): see [Static files](#static-files)"),
    S("static_path_route", str, "/static", "the path the --static-path-dir files are served under", metavar="PATH",
      normalise=_route, doc="matched against the path as the client sent it (before percent-decoding, without "
                            "--root-path); the route alone, or any path below it"),
    S("static_path_expires", int, 86400, "the static files' `Cache-Control: max-age`, in seconds (none: no "
      "Cache-Control)", least=0, none_as="none", metavar="SECONDS",
      doc="granian's default; a `--header` named cache-control applies when none"),
    S("proxy_headers", bool, False,
      "take client address and scheme from X-Forwarded-For/X-Forwarded-Proto (trusted peers only)"),
    S("forwarded_allow_ips", str, "127.0.0.1",
      "peers trusted for --proxy-headers and --proxy-protocol: IPs, networks, 'unix:' or '*', comma-separated",
      metavar="IPS"),
    S("proxy_protocol", bool, False, "every connection starts with a PROXY protocol header (v1 or v2, as HAProxy's "
      "send-proxy and send-proxy-v2 write it) that gives the client's and the server's addresses",
      doc="only from --forwarded-allow-ips peers (anyone else's connection is closed unanswered); a missing "
          "or malformed header closes the connection, with nothing passed to the app; `LOCAL` and `UNKNOWN` "
          "keep the connection's own addresses; the header counts against --timeout-header-read; not with TLS (the proxy terminates it)"),
    S("max_requests", int, None, "recycle a worker after about this many requests (one process: exit after them)",
      least=1, shown_default="off",
      doc="a worker's replacement starts first, then it retires (drained: nothing dropped); one process exits with 0 "
          "(as uvicorn), for systemd or a container runtime to restart it"),
    S("max_requests_jitter", int, 0, "add a random 0..N to --max-requests, per worker", least=0),
    S("timeout_worker_healthcheck", float, 30.0, "seconds a worker's loop may go without answering the "
      "supervisor's heartbeat before the worker is killed and replaced (none: never)", least=0,
      least_allowed=False, none_as="none", doc="with `--workers`: a worker whose loop is stuck in a blocking call"),
    S("workers_max_rss", int, None, "replace a worker whose resident memory passes this many MiB, "
      "gracefully, as --max-requests does", least=1, metavar="MIB", shown_default="off", supervisor_only=True,
      doc="runs the supervisor even with one worker; looked at every second"),
    S("workers", int, 1, "worker processes sharing the listening socket, under a supervisor", least=1,
      doc="the supervisor binds the socket (or takes `--fd`), restarts a worker that dies, and on "
          "SIGTERM/SIGINT stops accepting at once and stops the workers gracefully (killed "
          "`--timeout-graceful-shutdown` + 2 s later; a second signal kills at once); SIGHUP replaces "
          "every worker (new code), SIGTTIN/SIGTTOU add/retire one, SIGUSR1 reopens the log files"),
    S("worker_cpu_affinity", str, "auto", "confine each worker process to a CPU of its own: auto does when "
      "there are as many workers as CPUs the server may use", choices=("auto", "on", "off"), supervisor_only=True,
      doc="worker k gets the k-th of those CPUs (modulo their count; a replacement gets its predecessor's); "
          "keeps the hand-offs between a worker's loop and its WSGI threads on one CPU, and an ASGI worker's "
          "loop on its own. auto leaves the WSGI thread engine's workers on every CPU (they have no hand-offs, "
          "and do their I/O beside the app): with `--wsgi-engine threads` it does not pin them, with `auto` "
          "a worker whose app is WSGI takes the CPUs back; with one process, `on` confines it to the first"),
    S("metrics", bool, False, "serve Prometheus metrics, summed over the workers, at "
      "http://METRICS_ADDRESS:METRICS_PORT/metrics", supervisor_only=True,
      doc="runs the supervisor even with one worker, which answers on a thread of its own (while workers "
          "restart or hang); the metrics are listed in the section Metrics below"),
    S("metrics_address", str, "127.0.0.1", "the address the metrics endpoint binds to", metavar="ADDRESS",
      supervisor_only=True),
    S("metrics_port", int, 9090, "the metrics endpoint's TCP port", least=0, most=65535, metavar="PORT",
      supervisor_only=True),
    S("ssl_certfile", str, None, "serve HTTPS with this certificate chain (PEM; may hold the key too)",
      metavar="FILE", shown_default="off (HTTP)", doc="scope `scheme` `https`, ALPN `http/1.1`"),
    S("ssl_keyfile", str, None, "the certificate's private key (PEM)", metavar="FILE"),
    S("ssl_keyfile_password", str, None,
      "the private key's password (better given as SWORDFISH_SSL_KEYFILE_PASSWORD: "
      "an option is visible in the process list)", metavar="PASSWORD", secret=True),
    S("ssl_ca_certs", str, None, "CA certificates (PEM) that client certificates are verified with",
      metavar="FILE"),
    S("ssl_cert_reqs", str, "none", "client certificates: not asked for, verified if sent (optional), or required",
      choices=CERT_REQS),
    S("ssl_ciphers", str, None, "OpenSSL cipher list (None: the ssl module's)", metavar="CIPHERS"),
    S("ssl_engine", str, "auto", "the TLS implementation: rustls, OpenSSL (the ssl module), or auto: "
      "rustls where it serves the settings, else OpenSSL", choices=SSL_ENGINES,
      doc="rustls serves with `--loop swordfish`, a key that is not encrypted (no `--ssl-keyfile-password`) "
          "and no `--ssl-ciphers` (its suites: TLS 1.3's and TLS 1.2's ECDHE with AES-GCM or ChaCha20); "
          "`rustls` with any of those refuses to start. Client certificates (`--ssl-cert-reqs`) are verified "
          "by webpki under `rustls`, which refuses chains OpenSSL takes (a self-signed certificate as its "
          "own CA), so `auto` leaves them to OpenSSL. It is the faster (docs/design.md, \"TLS with rustls\"); "
          "under it a transport's `ssl_object` and `peercert` extra info are None"),
    S("reload", bool, False,
      "restart the workers when a watched file changes (development); a worker that fails to "
      "start leaves the running ones serving until the next change", supervisor_only=True,
      doc="the supervisor polls the watched files and replaces its workers as `--max-requests` does, "
          "so the port keeps answering. Hidden directories, `__pycache__`, `node_modules`, "
          "`site-packages` and virtual environments are never walked"),
    S("reload_dirs", list, [], "a directory to watch for --reload (none given: the --app-dir)",
      flag="--reload-dir", metavar="DIR", supervisor_only=True, shown_default="the `--app-dir`"),
    S("reload_includes", list, [], "a file name pattern to watch for --reload (none given: *.py)",
      flag="--reload-include", metavar="PATTERN", supervisor_only=True, shown_default="`*.py`"),
    S("reload_excludes", list, [], "a file or directory name pattern --reload ignores, besides hidden ones",
      flag="--reload-exclude", metavar="PATTERN", supervisor_only=True),
    S("reload_delay", float, 0.25, "seconds between two looks at the watched files",
      least=0, least_allowed=False, supervisor_only=True),
    S("ws", str, "auto", "WebSocket support (none: an upgrade request is served as a plain HTTP request)",
      choices=("auto", "none")),
    S("ws_max_size", int, 16 * 1024 * 1024, "largest WebSocket message in bytes (then close 1009)", least=1),
    S("ws_max_queue", int, 32, "WebSocket messages received and not yet read by the app; "
      "past it the server stops reading that socket", least=1),
    S("ws_ping_interval", float, 20.0, "seconds between the server's WebSocket pings (none: no pings)",
      least=0, least_allowed=False, none_as="none"),
    S("ws_ping_timeout", float, 20.0, "seconds a WebSocket ping waits for its pong before the server "
      "closes with 1011 (none: it waits for ever)", least=0, least_allowed=False, none_as="none"),
    S("ws_per_message_deflate", bool, True, "accept a client's permessage-deflate offer (compressed WebSocket messages)"),
]
del S

TABLE_BEGIN = "<!-- settings table: made by `python -m swordfish.server.settings --update docs/server.md` -->"
TABLE_END = "<!-- end of the settings table -->"


def _default_text(s):
    if s.shown_default is not None:
        return s.shown_default
    value = s.cli_default
    if s.kind is bool:
        return "on" if value else "off"
    if value is None:
        return f"`{s.none_as}`" if s.none_as else "–"
    if value in ("", []):
        return "–"
    return f"`{value}`"


def _md(text):
    """Text for a table cell: `|` escaped, and `*` outside code spans (not emphasis)."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("*", "\\*") for i, p in enumerate(parts))


def markdown_table():
    """The options table: one row per setting."""
    rows = ["| option | `Config`, `serve()` | environment | default | |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        if s.kind is bool:
            option = f"`{s.flag}`, `--no-{s.flag[2:]}`"
        elif s.choices:
            option = f"`{s.flag} {'|'.join(s.choices)}`"
        else:
            option = f"`{s.flag} {s.metavar}`"
        text = s.help_text + (f"; {s.doc}" if s.doc else "")
        if s.secret:
            text += "; a supervisor hands it to its workers in their environment, not on their command line"
        rows.append(f"| {_md(option)} | `{s.name}` | `{s.env}` | {_md(_default_text(s))} | {_md(text)} |")
    return "\n".join(rows) + "\n"


def with_table(readme):
    """`readme` (the text of the page holding the table) with the text between the markers
    replaced by markdown_table()."""
    pattern = re.compile(re.escape(TABLE_BEGIN) + r"\n.*?" + re.escape(TABLE_END), re.S)
    if not pattern.search(readme):
        raise ValueError("the settings table's markers are not in the page")
    return pattern.sub(lambda _: f"{TABLE_BEGIN}\n{markdown_table()}{TABLE_END}", readme, count=1)


def main(argv):
    if argv == ["--markdown"]:
        sys.stdout.write(markdown_table())
    elif len(argv) == 2 and argv[0] == "--update":
        with open(argv[1], encoding="utf-8") as f:
            text = with_table(f.read())  # before the file is opened for writing: it may fail
        with open(argv[1], "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.exit("usage: python -m swordfish.server.settings --markdown | --update docs/server.md")


if __name__ == "__main__":
    main(sys.argv[1:])
