"""A bare Werkzeug app (werkzeug.wrappers.Request/Response, no framework) for
tests/test_wsgi_frameworks.py: request data parsed by Werkzeug (args, form, files, cookies,
headers, the streamed body), cookies and redirects set by it."""

import hashlib
import json

from werkzeug.utils import redirect
from werkzeug.wrappers import Request, Response


def _json(data, status=200):
    return Response(json.dumps(data), status=status, mimetype="application/json")


@Request.application
def app(request):
    if request.path == "/info":
        return _json({
            "method": request.method,
            "path": request.path,
            "args": request.args.to_dict(flat=False),
            "header": request.headers.get("X-Test"),
            "cookie": request.cookies.get("flavour"),
            "remote_addr": request.remote_addr,
            "scheme": request.scheme,
            "host": request.host,
            "url": request.url,
        })
    if request.path == "/form":
        files = {name: {"filename": f.filename, "sha256": hashlib.sha256(f.read()).hexdigest()}
                 for name, f in request.files.items()}
        return _json({"form": request.form.to_dict(flat=False), "files": files})
    if request.path == "/stream-in":
        h, n = hashlib.sha256(), 0
        while data := request.stream.read(65536):
            h.update(data)
            n += len(data)
        return _json({"length": n, "sha256": h.hexdigest()})
    if request.path == "/cookie":
        resp = Response("cookie set")
        resp.set_cookie("flavour", "mint", httponly=True)
        return resp
    if request.path == "/redirect":
        return redirect("/info?from=redirect")
    return Response("not here", status=404)
