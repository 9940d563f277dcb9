"""A Django project configured in code (no settings module, no database), served through
`django.core.asgi.get_asgi_application()`. This module is also its ROOT_URLCONF; the
settings and the views it shares with wsgi_django.py come from django_project.py.

Django's settings are global to the process: `get_application()` configures them on its
first call only, so importing this module changes nothing, and other tests never see
Django configured unless they asked for this app."""

import asyncio

from django.http import JsonResponse, StreamingHttpResponse

from . import Probe
from .django_project import configure, request_info, urls

PROBE = Probe()  # views report here; a test replaces it with a fresh one (reset())


def get_application():
    """The ASGI application (configures Django on the first call)."""
    configure(__name__, LOGGING_CONFIG=None)  # None: leave the process's logging alone
    from django.core.asgi import get_asgi_application

    return get_asgi_application()


def reset():
    global PROBE
    PROBE = Probe()
    return PROBE


async def info(request, num):
    return JsonResponse(request_info(request, num))


def stream(request):
    n = int(request.GET["n"])

    async def pieces():
        for i in range(n):
            yield f"django piece {i}\n"
            await asyncio.sleep(0)

    return StreamingHttpResponse(pieces(), content_type="text/plain")


def endless(request):
    async def pieces():
        try:
            i = 0
            while True:
                yield b"%08d" % i + b"d" * 8184
                i += 1
                await asyncio.sleep(0)
        finally:
            PROBE.stream_closed.set()

    return StreamingHttpResponse(pieces(), content_type="application/octet-stream")


urlpatterns = urls(info, stream, endless=endless)
