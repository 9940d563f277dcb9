"""The Werkzeug app's page called directly, with no server, for app_cpu.py: the CPU time
(time.thread_time) of each call and the iteration of its body, first on one thread, then on
eight threads taking turns (each hands the next page to the next thread, so every page
runs right after a switch, as in a server's pool). Prints one JSON line:
{"one_thread": {"median_us", "mean_us"}, "threads_in_turn": {...}}."""
import io
import json
import statistics
import sys
import threading
import time

from werkzeug_app import app

PAGES = 3000
THREADS = 8


def environ():
    return {
        "REQUEST_METHOD": "GET", "SCRIPT_NAME": "", "PATH_INFO": "/", "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "127.0.0.1:8000", "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "40000",
        "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(),
        "wsgi.errors": sys.stderr, "wsgi.multithread": True, "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }


def start_response(status, headers, exc_info=None):
    return None


def page_us():
    t0 = time.thread_time_ns()
    body = app(environ(), start_response)
    try:
        b"".join(body)
    finally:
        body.close()
    return (time.thread_time_ns() - t0) / 1e3


def in_turn(threads, pages):
    """Each of `threads` renders a page in its turn, then wakes the next."""
    turns = [threading.Semaphore(0) for _ in range(threads)]
    times, finished = [], threading.Event()

    def worker(i):
        while True:
            turns[i].acquire()
            if finished.is_set():
                return
            times.append(page_us())
            if len(times) >= pages:
                finished.set()
                for t in turns:
                    t.release()
                return
            turns[(i + 1) % threads].release()

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    turns[0].release()
    for w in workers:
        w.join()
    return times


def summary(times):
    kept = times[len(times) // 5:]  # the first fifth warms the caches
    return {"median_us": statistics.median(kept), "mean_us": statistics.fmean(kept)}


if __name__ == "__main__":
    for _ in range(200):
        page_us()
    print(json.dumps({"one_thread": summary(in_turn(1, PAGES)),
                      "threads_in_turn": summary(in_turn(THREADS, PAGES))}))
