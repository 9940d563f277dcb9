"""A Django project configured in code (no settings module, no database), served through
`django.core.asgi.get_asgi_application()`. This module is also its ROOT_URLCONF.

Django's settings are global to the process: `get_application()` configures them on its
first call only, so importing this module changes nothing, and other tests never see
Django configured unless they asked for this app."""

import asyncio
import hashlib
import threading

from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from . import Probe

PROBE = Probe()  # views report here; a test replaces it with a fresh one (reset())
_lock = threading.Lock()


def get_application():
    """The ASGI application (configures Django on the first call)."""
    import django
    from django.conf import settings

    with _lock:
        if not settings.configured:
            settings.configure(
                DEBUG=False,
                ALLOWED_HOSTS=["*"],
                ROOT_URLCONF=__name__,
                SECRET_KEY="only-for-tests",
                INSTALLED_APPS=[],
                MIDDLEWARE=["django.middleware.csrf.CsrfViewMiddleware"],
                DATABASES={},
                USE_TZ=True,
                LOGGING_CONFIG=None,  # leave the process's logging alone
            )
            django.setup(set_prefix=False)
    from django.core.asgi import get_asgi_application

    return get_asgi_application()


def reset():
    global PROBE
    PROBE = Probe()
    return PROBE


def hello(request):
    return HttpResponse(f"hello {request.GET.get('name', 'nobody')}", content_type="text/plain")


async def info(request, num):
    return JsonResponse({
        "num": num,
        "method": request.method,
        "path": request.path,
        "query": request.GET.getlist("q"),
        "header": request.headers.get("x-test"),
        "cookie": request.COOKIES.get("flavour"),
        "scheme": request.scheme,
    })


@csrf_exempt
def upload(request):
    if request.method != "POST":
        return HttpResponse(status=405)
    body = request.body
    return JsonResponse({
        "length": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
        "content_type": request.content_type,
    })


def guarded(request):  # not csrf_exempt: a POST without a token is refused
    return HttpResponse("should not get here")


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


def error(request):
    raise ValueError("a broken Django view")


urlpatterns = [
    path("hello", hello),
    path("info/<int:num>", info),
    path("upload", upload),
    path("guarded", guarded),
    path("stream", stream),
    path("endless", endless),
    path("error", error),
]
