"""A Django project configured in code (no settings module, no database), served through
`django.core.wsgi.get_wsgi_application()` as `application`; this module is also its
ROOT_URLCONF. The WSGI counterpart of django_app.py, with the settings and the views they
share from django_project.py.

Django's settings are global to the process and this module configures them when it is
imported: tests/test_wsgi_frameworks.py runs it only in a subprocess (`python -m swordfish
serve apps.wsgi_django:application`), never in the test process, where it would take the
place of django_app's settings."""

from .django_project import configure, request_info, urls

configure(__name__)

from django.core.wsgi import get_wsgi_application  # noqa: E402 - after the settings
from django.http import FileResponse, JsonResponse, StreamingHttpResponse  # noqa: E402


def info(request, num):
    return JsonResponse({
        **request_info(request, num),
        "multithread": request.META["wsgi.multithread"],
        "protocol": request.META["SERVER_PROTOCOL"],
    })


def stream(request):
    n = int(request.GET["n"])
    return StreamingHttpResponse((f"django piece {i}\n" for i in range(n)), content_type="text/plain")


def source(request):
    # FileResponse goes out through wsgi.file_wrapper (WSGIHandler hands it its file).
    return FileResponse(open(__file__, "rb"), content_type="text/x-python")


urlpatterns = urls(info, stream, source=source)

application = get_wsgi_application()
