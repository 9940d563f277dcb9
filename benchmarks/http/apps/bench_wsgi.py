"""The WSGI app of the throughput workloads, the twin of bench.py for the WSGI servers:

    GET  /      "Hello, world!" in plain text
    GET  /10k   a 10 KiB body
    POST /echo  the request body, read whole from wsgi.input and returned as one chunk

Every response is returned as an iterable (a one-item list) with its Content-Length;
nothing goes through start_response's write().
"""

HELLO = b"Hello, world!"
TEN_K = b"x" * 10240
TEXT = "text/plain"
BINARY = "application/octet-stream"


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/echo":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body, kind = environ["wsgi.input"].read(length), BINARY
    elif path == "/10k":
        body, kind = TEN_K, BINARY
    elif path == "/":
        body, kind = HELLO, TEXT
    else:
        start_response("404 Not Found", [("Content-Type", TEXT), ("Content-Length", "9")])
        return [b"not found"]
    start_response("200 OK", [("Content-Type", kind), ("Content-Length", str(len(body)))])
    return [body]
