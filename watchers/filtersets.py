from kernel.filtersets import SearchFilterSet, StateFilter

from .models import Watcher, WatcherState


class WatcherFilterSet(SearchFilterSet):
    search_fields = ("name", "component")
    state = StateFilter(choices=WatcherState.choices)

    class Meta:
        model = Watcher
        fields = ("namespace", "name", "component", "state")
