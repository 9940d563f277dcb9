"""A Django project configured in code (no settings module, no database), served through
`django.core.wsgi.get_wsgi_application()` as `application`; this module is also its
ROOT_URLCONF. The WSGI counterpart of django_app.py.

Django's settings are global to the process and this module configures them when it is
imported: tests/test_wsgi_frameworks.py runs it only in a subprocess (`python -m swordfish
serve apps.wsgi_django:application`), never in the test process, where it would take the
place of django_app's settings."""

import hashlib

import django
from django.conf import settings

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
    )
    django.setup(set_prefix=False)

from django.core.wsgi import get_wsgi_application  # noqa: E402 - after the settings
from django.http import FileResponse, HttpResponse, JsonResponse, StreamingHttpResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402


def hello(request):
    return HttpResponse(f"hello {request.GET.get('name', 'nobody')}", content_type="text/plain")


def info(request, num):
    return JsonResponse({
        "num": num,
        "method": request.method,
        "path": request.path,
        "query": request.GET.getlist("q"),
        "header": request.headers.get("x-test"),
        "cookie": request.COOKIES.get("flavour"),
        "scheme": request.scheme,
        "multithread": request.META["wsgi.multithread"],
        "protocol": request.META["SERVER_PROTOCOL"],
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
    return StreamingHttpResponse((f"django piece {i}\n" for i in range(n)), content_type="text/plain")


def source(request):
    # FileResponse goes out through wsgi.file_wrapper (WSGIHandler hands it its file).
    return FileResponse(open(__file__, "rb"), content_type="text/x-python")


def error(request):
    raise ValueError("a broken Django view")


urlpatterns = [
    path("hello", hello),
    path("info/<int:num>", info),
    path("upload", upload),
    path("guarded", guarded),
    path("stream", stream),
    path("source", source),
    path("error", error),
]

application = get_wsgi_application()
