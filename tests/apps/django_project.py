"""What the two Django projects configured in code share: tests/apps/django_app.py (ASGI)
and tests/apps/wsgi_django.py (WSGI) each call `configure()` with their own module as
ROOT_URLCONF, and route (`urls()`) to the synchronous views below besides their own (and
answer info/<num> with `request_info`).

Importing this module configures nothing: Django's settings are global to the process,
and only the module that calls `configure()` (django_app on its first
`get_application()`, wsgi_django when it is imported) sets them."""

import hashlib
import threading

from django.http import HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

_lock = threading.Lock()


def configure(urlconf, **extra):
    """Configures Django's settings (no database, no installed apps, CSRF middleware) with
    `urlconf` as ROOT_URLCONF and the `extra` settings, and sets Django up; nothing if the
    process's settings are configured already."""
    import django
    from django.conf import settings

    with _lock:
        if not settings.configured:
            settings.configure(
                DEBUG=False,
                ALLOWED_HOSTS=["*"],
                ROOT_URLCONF=urlconf,
                SECRET_KEY="only-for-tests",
                INSTALLED_APPS=[],
                MIDDLEWARE=["django.middleware.csrf.CsrfViewMiddleware"],
                DATABASES={},
                USE_TZ=True,
                **extra,
            )
            django.setup(set_prefix=False)


def request_info(request, num):
    """What both projects' info/<num> view answers about the request (as JSON)."""
    return {
        "num": num,
        "method": request.method,
        "path": request.path,
        "query": request.GET.getlist("q"),
        "header": request.headers.get("x-test"),
        "cookie": request.COOKIES.get("flavour"),
        "scheme": request.scheme,
    }


def hello(request):
    return HttpResponse(f"hello {request.GET.get('name', 'nobody')}", content_type="text/plain")


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


def error(request):
    raise ValueError("a broken Django view")


def urls(info, stream, **more):
    """A project's urlpatterns: the views above, its own info and stream views, and the
    views in `more` (each at its name)."""
    return [
        path("hello", hello),
        path("info/<int:num>", info),
        path("upload", upload),
        path("guarded", guarded),
        path("stream", stream),
        *(path(name, view) for name, view in more.items()),
        path("error", error),
    ]
