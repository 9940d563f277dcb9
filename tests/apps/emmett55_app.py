"""A real emmett55 app (Emmett's micro framework, RSGI): a page, a JSON API, a form POST and a
WebSocket route."""

import os

from emmett55 import App, request, websocket
from emmett55.tools import service

app = App(__name__, root_path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "emmett_site"))


@app.route("/")
async def index():
    return "hello from emmett55"


@app.route("/api/sum", methods=["post"])
@service.json
async def total():
    data = await request.body_params
    return {"sum": sum(data["numbers"])}


@app.route("/form", methods=["post"])
async def form():
    params = await request.body_params
    return f"name={params.name}"


@app.websocket("/ws")
async def echo():
    while True:
        message = await websocket.receive()
        await websocket.send(message[::-1])
