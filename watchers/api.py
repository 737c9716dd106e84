"""API of Watchers."""

from drf_spectacular.utils import extend_schema_view

from kernel.api.resources import ResourceViewSet, document_schema
from kernel.documents import registry

from .filtersets import WatcherFilterSet
from .models import Watcher
from .resources import WatcherKind
from .services import watcher_delete

_WATCHER = registry.for_document({"apiVersion": WatcherKind.api_version, "kind": WatcherKind.kind})


@extend_schema_view(**document_schema(_WATCHER, tags=["watchers"]))
class WatcherViewSet(ResourceViewSet):
    """Watchers: what the runtime watcher in every runtime watches and which component it tells, in
    upstream's shape (``RuntimeWatcher`` is an alias)."""

    kind = _WATCHER
    queryset = Watcher.objects.all()
    filterset_class = WatcherFilterSet

    def delete_object(self, obj: Watcher) -> bool:
        return watcher_delete(watcher=obj)
