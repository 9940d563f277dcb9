"""The report's rows and cells: which app each server runs and its command line, built by the
HTTP suite's command builders (../http/servers.py) with their defaults otherwise, and the
worker counts and database latencies of its cells."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HTTP = os.path.join(os.path.dirname(HERE), "http")
if HTTP not in sys.path:
    sys.path.append(HTTP)
from servers import SERVERS, entry, gunicorn  # noqa: E402  (the HTTP suite's)

WSGI_APP, ASGI_APP = "werkzeug_app:app", "starlette_app:app"
GTHREAD_THREADS = 8
# The report's cells: worker counts x database latencies (ms).
WORKERS, LATENCIES = [1, 2], [0, 25]

# name -> (label, app target, command(target, port, workers))
ROWS = {
    "gunicorn-sync": ("gunicorn sync", WSGI_APP, gunicorn("sync")),
    "gunicorn-gthread": (f"gunicorn gthread --threads {GTHREAD_THREADS}", WSGI_APP,
                         entry(f"gunicorn-gthread-t{GTHREAD_THREADS}").builder),
    "gunicorn-gevent": ("gunicorn gevent", WSGI_APP, SERVERS["gunicorn-gevent"].builder),
    "uvicorn": ("uvicorn (httptools, uvloop)", ASGI_APP, SERVERS["uvicorn-httptools"].builder),
    "gunicorn-uvicorn": ("gunicorn + uvicorn-worker", ASGI_APP, gunicorn("uvicorn_worker.UvicornWorker")),
    "granian-wsgi": ("granian WSGI", WSGI_APP, SERVERS["granian-wsgi"].builder),
    "granian-asgi": ("granian ASGI (uvloop)", ASGI_APP, SERVERS["granian-uvloop"].builder),
    "swordfish-wsgi": ("swordfish WSGI", WSGI_APP, SERVERS["swordfish-wsgi"].builder),
    "swordfish-asgi": ("swordfish ASGI", ASGI_APP, SERVERS["swordfish"].builder),
}


def _row(name):
    """The row of `name`. `NAME@K` runs NAME's server again as a row of its own (the same
    command): two copies of one server measured alongside each other show how far the
    counts of identical servers differ from round to round."""
    base, at, copy = name.partition("@")
    return ROWS.get(base) if not at or copy.isdigit() else None


def known(name):
    return _row(name) is not None


def command(name, port, workers):
    _, target, build = _row(name)
    return build(target, port, workers)


def label(name):
    row = _row(name)
    if row is None:
        return name
    copy = name.partition("@")[2]
    return f"{row[0]} (copy {copy})" if copy else row[0]
