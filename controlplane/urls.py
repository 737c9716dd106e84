"""URLs of the web role: admin, REST API, OpenAPI, health and metrics."""

from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from kernel.api.errors import api_not_found

from . import favicon, health

# A request Django refuses (a bad Host header, too many form fields, ...): a short 400 naming
# why, JSON outside the browser (kernel.badrequests), never Django's HTML page.
handler400 = "kernel.badrequests.bad_request"

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/fleet/", include("console.dashboard.urls")),
    path("admin/", admin.site.urls),
    path("oidc/", include("access.urls")),
    path("api/v1/", include("controlplane.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    # Last of the API routes: every other URL under /api/ answers a JSON 404.
    re_path(r"^api/(?P<path>.*)$", api_not_found, name="api-not-found"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    path("favicon.ico", favicon.favicon, name="favicon"),
]
