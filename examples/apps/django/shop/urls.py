from django.http import HttpResponse
from django.urls import path


def home(request):
    scheme = "https" if request.is_secure() else "http"
    return HttpResponse(f"hello from django over {scheme}\n", content_type="text/plain")


urlpatterns = [path("", home)]
