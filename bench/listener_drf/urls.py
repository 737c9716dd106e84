from django.urls import path

from .views import WatchEventView

urlpatterns = [path("<str:contract>/<str:component>/event", WatchEventView.as_view())]
