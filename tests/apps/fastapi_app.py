"""A FastAPI app: a pydantic model body (valid and invalid), dependency injection, async
and sync (threadpool) path operations, and a lifespan."""

import contextlib
import threading

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from pydantic import BaseModel, Field

from . import Probe


class Item(BaseModel):
    name: str = Field(min_length=1)
    price: float = Field(gt=0)
    tags: list[str] = []


def create_app(probe=None):
    probe = probe or Probe()

    @contextlib.asynccontextmanager
    async def lifespan(app):
        probe.loop_thread = threading.get_ident()
        probe.events.append("startup")
        yield {"db": {"widget": Item(name="widget", price=2.5, tags=["stock"])}}
        probe.events.append("shutdown")

    app = FastAPI(lifespan=lifespan)
    app.probe = probe

    def pagination(offset: int = 0, limit: int = 10):
        return {"offset": offset, "limit": limit}

    def database(request: Request):
        return request.state.db

    def token(x_token: str = Header()):
        if x_token != "secret":
            raise HTTPException(status_code=403, detail="bad token")
        return x_token

    @app.post("/items/{item_id}")
    async def create_item(item_id: int, item: Item, page: dict = Depends(pagination)):
        return {"item_id": item_id, "item": item.model_dump(), "total": item.price * 2, "page": page}

    @app.get("/items/{name}")
    async def read_item(name: str, db: dict = Depends(database), _: str = Depends(token)):
        if name not in db:
            raise HTTPException(status_code=404, detail=f"no item {name!r}")
        return db[name]

    @app.get("/async-thread")
    async def async_thread():
        return {"in_loop_thread": threading.get_ident() == probe.loop_thread}

    @app.get("/sync-thread")
    def sync_thread():  # a def path operation: FastAPI runs it in its threadpool
        return {"in_loop_thread": threading.get_ident() == probe.loop_thread}

    return app
