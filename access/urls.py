"""``/oidc/``: the single sign-on's login, callback and logout."""

from django.urls import path

from . import oidc

urlpatterns = [
    path("authenticate/", oidc.LoginView.as_view(), name="oidc_authentication_init"),
    path("callback/", oidc.CallbackView.as_view(), name="oidc_authentication_callback"),
    path("logout/", oidc.LogoutView.as_view(), name="oidc_logout"),
]
