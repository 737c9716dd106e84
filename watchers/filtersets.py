import django_filters

from kernel.filtersets import SearchFilterSet

from .models import Watcher, WatcherState


class WatcherFilterSet(SearchFilterSet):
    search_fields = ("name", "component")
    state = django_filters.MultipleChoiceFilter(choices=WatcherState.choices)

    class Meta:
        model = Watcher
        fields = ("namespace", "name", "component", "state")
