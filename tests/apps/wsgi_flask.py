"""A Flask app for tests/test_wsgi_frameworks.py, built by `create_app(probe, file_path)`:
routes, JSON in and out, a form with a file, a streamed response whose generator waits on
the probe's gate, `send_file` (which goes through wsgi.file_wrapper: `SpyFileWrapper`
records that it did), and a view that raises (Flask answers it with its own 500)."""

import hashlib

from flask import Flask, Response, jsonify, request, send_file


class SpyFileWrapper:
    """WSGI middleware: the server's wsgi.file_wrapper, with each call recorded in
    probe.sent (what it returns is the server's own wrapper, untouched)."""

    def __init__(self, app, probe):
        self.app = app
        self.probe = probe

    def __call__(self, environ, start_response):
        wrapper = environ.get("wsgi.file_wrapper")
        if wrapper is not None:
            def spy(filelike, block_size=8192):
                self.probe.sent.append(("file_wrapper", environ["PATH_INFO"]))
                return wrapper(filelike, block_size)

            environ["wsgi.file_wrapper"] = spy
        return self.app(environ, start_response)


def create_app(probe, file_path):
    app = Flask(__name__)

    @app.get("/hello/<name>")
    def hello(name):
        return f"hello {name} ({request.args.get('lang', 'en')})"

    @app.post("/json")
    def json_in_and_out():
        data = request.get_json()
        return jsonify(got=data, total=sum(data["numbers"]), chunked=request.content_length is None)

    @app.post("/form")
    def form():
        upload = request.files["doc"]
        content = upload.read()
        return jsonify(field=request.form["field"], filename=upload.filename, size=len(content),
                       sha256=hashlib.sha256(content).hexdigest())

    @app.get("/stream")
    def stream():
        def pieces():
            yield "first\n"
            probe.events.append(("gate", probe.gate.wait(5)))  # until the client has "first"
            yield "second\n"

        return Response(pieces(), mimetype="text/plain")

    @app.get("/file")
    def file():
        return send_file(file_path, mimetype="application/octet-stream")

    @app.get("/error")
    def error():
        raise ValueError("a broken Flask view")

    return SpyFileWrapper(app, probe)
