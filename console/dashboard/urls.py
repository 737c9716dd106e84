"""The fleet dashboard, under the admin's prefix and behind its staff login."""

from django.contrib import admin
from django.urls import path

from . import views

app_name = "dashboard"

urlpatterns = [
    path("", admin.site.admin_view(views.fleet_dashboard), name="fleet"),
]
