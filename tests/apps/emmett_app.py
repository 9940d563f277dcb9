"""A real Emmett app (Emmett speaks RSGI; `swordfish serve` picks it by `__rsgi__`): a page,
a template, a form POST, a JSON API and a WebSocket route. Its folders are emmett_site/."""

import os

from emmett import App, request, websocket
from emmett.tools import service

app = App(__name__, root_path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "emmett_site"))


@app.route("/")
async def index():
    return "hello from emmett"


@app.route("/page/<str:title>", template="page.html")
async def page(title):
    return {"title": title, "items": ["one", "<two>"]}


@app.route("/form", methods=["post"])
async def form():
    params = await request.body_params
    return f"name={params.name} size={len(params.blob or '')}"


@app.route("/api/items/<int:item>")
@service.json
async def item(item):
    return {"item": item, "q": request.query_params.q, "agent": request.headers.get("user-agent")}


@app.websocket("/ws")
async def echo():
    while True:
        message = await websocket.receive()
        await websocket.send(f"echo {message}")
