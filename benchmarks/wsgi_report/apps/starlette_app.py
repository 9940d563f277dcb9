"""The report's ASGI app on Starlette, the twin of werkzeug_app.py: `/` renders
templates/index.html through starlette.templating (Jinja2), `/api` awaits the fake
database's latency (asyncio.sleep) and returns the row as JSON."""
import asyncio

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from shop import LATENCY, PRODUCTS, ROW, TEMPLATES, TITLE

templates = Jinja2Templates(directory=TEMPLATES)


async def page(request):
    return templates.TemplateResponse(request, "index.html", {"title": TITLE, "products": PRODUCTS})


async def api(request):
    await asyncio.sleep(LATENCY)
    return JSONResponse(ROW)


app = Starlette(routes=[Route("/", page), Route("/api", api)])
