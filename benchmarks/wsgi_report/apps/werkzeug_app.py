"""The report's WSGI app on Werkzeug: `/` renders templates/index.html with Jinja2, `/api`
queries the fake database synchronously (time.sleep of its latency; under gunicorn's
gevent worker the patched, cooperative sleep) and returns the row as JSON."""
import json
import time

import jinja2
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from shop import LATENCY, PRODUCTS, ROW, TEMPLATES, TITLE

_page = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True).get_template("index.html")


def page(request):
    return Response(_page.render(title=TITLE, products=PRODUCTS), mimetype="text/html")


def api(request):
    time.sleep(LATENCY)
    return Response(json.dumps(ROW, separators=(",", ":")), mimetype="application/json")


URLS = Map([Rule("/", endpoint=page), Rule("/api", endpoint=api)])


@Request.application
def app(request):
    try:
        view, _ = URLS.bind_to_environ(request.environ).match()
    except HTTPException as exc:
        return exc
    return view(request)
