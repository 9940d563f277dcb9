"""swordfish: the fastest complete async runtime for Python.

    import swordfish
    swordfish.run(main())                                   # like asyncio.run
    asyncio.run(main(), loop_factory=swordfish.new_event_loop)  # Python 3.12+
    swordfish.install()                                     # make it asyncio's default
"""

from ._loop import Loop
from ._native import Handle, TimerHandle
from ._runner import EventLoopPolicy, install, new_event_loop, run


def serve(app, *host_port, **options):
    """Serve an ASGI app over HTTP/1.1 until SIGINT/SIGTERM (see `swordfish.server`); the
    options are the settings of `swordfish.server.settings.SETTINGS` (host and port may also
    come by position)."""
    from .server import serve as _serve

    return _serve(app, *host_port, **options)


__all__ = ["EventLoopPolicy", "Handle", "Loop", "TimerHandle", "install", "new_event_loop", "run", "serve"]
__version__ = "0.1.0"
