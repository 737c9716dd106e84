"""Settings of the DRF listener variant: the project's, with only the WatchEvent route and one
middleware (CommonMiddleware, for the Content-Length a keep-alive client needs; a listener needs
no sessions, CSRF or messages: the fairest DRF deployment)."""

from controlplane.settings import *  # noqa: F403

ROOT_URLCONF = "bench.listener_drf.urls"
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
