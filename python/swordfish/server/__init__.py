"""The swordfish HTTP server: ASGI 3 over HTTP/1.1, protocol in Rust on the loop thread.

    import swordfish
    swordfish.serve(app, host="127.0.0.1", port=8000)

    server = swordfish.server.Server(swordfish.server.Config(app, port=0))
    await server.serve()        # until server.shutdown()
"""

from .._native import ClientDisconnected
from .config import Config
from .lifespan import LifespanFailed
from .server import Server, serve

__all__ = ["ClientDisconnected", "Config", "LifespanFailed", "Server", "serve"]
