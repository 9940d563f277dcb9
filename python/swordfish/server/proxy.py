"""`--proxy-headers`: behind a reverse proxy, take the client address and the scheme from
`X-Forwarded-For` and `X-Forwarded-Proto` (the headers nginx, HAProxy and the cloud load
balancers set, and the ones uvicorn reads), but only on connections from a trusted proxy
(`--forwarded-allow-ips`). The RFC 7239 `Forwarded` header is not read: proxies that send
it also send the X- headers, and reading both would let a client pick the one it forges."""

import ipaddress


class TrustedHosts:
    """A `--forwarded-allow-ips` list: `*`, IP addresses, networks (`10.0.0.0/8`) and
    `unix:` (connections on a Unix socket, which have no client address), comma-separated.
    Anything else is compared as a literal string."""

    def __init__(self, spec):
        if isinstance(spec, str):
            spec = spec.split(",")
        self.any = False
        self.unix = False
        self.networks = []
        self.literals = set()
        for item in (s.strip() for s in spec):
            if not item:
                continue
            if item == "*":
                self.any = True
            elif item == "unix:":
                self.unix = True
            else:
                try:
                    self.networks.append(ipaddress.ip_network(item, strict=False))
                except ValueError:
                    self.literals.add(item)

    def __contains__(self, host):
        if self.any:
            return True
        if host is None:
            return self.unix
        if host in self.literals:
            return True
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(addr in net for net in self.networks)


def comma_items(values):
    """The comma-separated items of header values (str), stripped, in order."""
    return [s for v in values for s in (p.strip() for p in v.split(",")) if s]


def _values(headers, name):
    """The comma-separated items of every `name` header of an ASGI scope, in order."""
    return comma_items(v.decode("latin-1") for n, v in headers if n == name)


class ProxyHeaders:
    """ASGI middleware: rewrites the scope's `client` and `scheme` from the forwarding
    headers when the connection comes from a trusted proxy.

    `X-Forwarded-For: client, proxy1, proxy2`: each proxy appends the address it got the
    request from, so the list is read right to left and the first address that is not a
    trusted proxy is the client (an untrusted client can put anything on the left).
    If every address is trusted, the leftmost is taken. The port is unknown: 0.
    `X-Forwarded-Proto`: the last value (the one the nearest proxy set)."""

    def __init__(self, app, trusted="127.0.0.1"):
        self.app = app
        self.trusted = trusted if isinstance(trusted, TrustedHosts) else TrustedHosts(trusted)

    def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            client = scope.get("client")
            if (client[0] if client else None) in self.trusted:
                headers = scope["headers"]
                proto = _values(headers, b"x-forwarded-proto")
                if proto:
                    scheme = proto[-1].lower()
                    if scope["type"] == "websocket":
                        scheme = {"http": "ws", "https": "wss"}.get(scheme, scheme)
                    if scheme in ("http", "https", "ws", "wss"):
                        scope["scheme"] = scheme
                hosts = _values(headers, b"x-forwarded-for")
                if hosts:
                    scope["client"] = (forwarded_client(hosts, self.trusted), 0)
        return self.app(scope, receive, send)


def forwarded_client(hosts, trusted):
    """The client of an `X-Forwarded-For` list (see ProxyHeaders): the rightmost address
    that is not a trusted proxy, or the leftmost if all are."""
    for h in reversed(hosts):
        if h not in trusted:
            return h
    return hosts[0]


def _host_of(address):
    """The host of an RSGI "host:port" or "[v6]:port" address."""
    host = address.rpartition(":")[0] if ":" in address else address
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


class RsgiProxyHeaders(ProxyHeaders):
    """`ProxyHeaders` for an RSGI app: the same rules; the scope's `client` ("host:0", the
    port unknown) and `scheme` are the forwarding headers' when the connection comes from a
    trusted proxy (the access log sees them too)."""

    def __call__(self, scope, protocol):
        if _host_of(scope.client) in self.trusted:
            headers = scope.headers
            scheme = scope.scheme
            proto = comma_items(headers.get_all("x-forwarded-proto"))
            if proto and proto[-1].lower() in ("http", "https"):
                scheme = proto[-1].lower()
            hosts = comma_items(headers.get_all("x-forwarded-for"))
            if hosts or scheme != scope.scheme:
                scope._forward(forwarded_client(hosts, self.trusted) if hosts else None, scheme == "https")
        return self.app(scope, protocol)
