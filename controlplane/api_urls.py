"""Routes of ``/api/v1/``: every app's API, on one router (its root lists them all)."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from access.api import FleetRoleBindingViewSet
from console.api.audit import AuditEntryViewSet
from console.api.rollouts import RolloutViewSet
from console.api.views import ApplyView, KymaViewSet, ModuleConfigViewSet, ModuleViewSet, SyncResourceViewSet
from listener.api import WatchEventViewSet
from pki.api import CertificateAuthorityViewSet, CertificateViewSet
from watchers.api import WatcherViewSet

router = DefaultRouter(trailing_slash=True)
router.register("kymas", KymaViewSet, basename="kyma")
router.register("watchers", WatcherViewSet, basename="watcher")
router.register("modules", ModuleViewSet, basename="module")
router.register("moduleconfigs", ModuleConfigViewSet, basename="moduleconfig")
router.register("syncresources", SyncResourceViewSet, basename="syncresource")
router.register("certificates", CertificateViewSet, basename="certificate")
router.register("certificateauthorities", CertificateAuthorityViewSet, basename="certificateauthority")
router.register("events", WatchEventViewSet, basename="event")
router.register("audit", AuditEntryViewSet, basename="audit")
router.register("rollouts", RolloutViewSet, basename="rollout")
router.register("fleetrolebindings", FleetRoleBindingViewSet, basename="fleetrolebinding")

urlpatterns = [
    path("apply/", ApplyView.as_view(), name="apply"),
    path("", include(router.urls)),
]
