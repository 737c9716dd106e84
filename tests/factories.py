"""factory_boy factories for the domain models (valid by default, override what a test needs)."""

from typing import Any

import factory

from fleet.models import Kyma, Module, SyncResource
from fleet.models.bookkeeping import FORMER_COLUMNS, ROWS
from watchers.models import Watcher

SAMPLE_MANIFESTS = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: kyma-system
data:
  level: info
"""


class KymaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Kyma

    namespace = "kcp-system"
    name = factory.Sequence(lambda n: f"kyma-{n:05d}")
    runtime_id = factory.LazyAttribute(lambda k: f"rt-{k.name}")
    skr_domain = factory.LazyAttribute(lambda k: f"{k.name}.skr.example.com")
    channel = "regular"
    modules = factory.LazyFunction(list)

    @classmethod
    def _create(cls, model_class: type, *args: Any, **kwargs: Any) -> Any:
        """The former columns of the Kyma (``last_reconcile_at=``, ``watcher_last_seen_at=``, ...)
        go into the rows beside it (fleet.models.bookkeeping)."""
        former = {name: kwargs.pop(name) for name in list(kwargs) if name in FORMER_COLUMNS}
        kyma = super()._create(model_class, *args, **kwargs)
        if former:
            beside(kyma, **former)
        return kyma


def beside(kyma: Any, **former: Any) -> None:
    """Set values of the rows beside a Kyma (or a Kyma's id) by the former names of its columns
    (``beside(kyma, watcher_last_seen_at=now)``), making the rows that are missing."""
    pk = kyma if isinstance(kyma, int) else kyma.pk
    by_row: dict[str, dict[str, Any]] = {}
    for name, value in former.items():
        row, field = FORMER_COLUMNS[name]
        by_row.setdefault(row, {})[field] = value
    for row, values in by_row.items():
        ROWS[row].objects.update_or_create(kyma_id=pk, defaults=values)
        if not isinstance(kyma, int):
            kyma._state.fields_cache.pop(row, None)  # the next read finds them


class ModuleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Module

    name = factory.Sequence(lambda n: f"module{n}")
    channels = factory.LazyFunction(lambda: {"regular": "1.0.0", "fast": "1.1.0"})
    cr_group = "operator.kyma-project.io"
    cr_version = "v1alpha1"
    cr_kind = factory.LazyAttribute(lambda m: m.name.capitalize())
    cr_plural = factory.LazyAttribute(lambda m: f"{m.name}s")
    default_cr = factory.LazyFunction(lambda: {"spec": {"replicas": 1}})


class WatcherFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Watcher

    namespace = "kcp-system"
    name = factory.Sequence(lambda n: f"watcher-{n}")
    manager = factory.Sequence(lambda n: f"manager-{n}")
    component = factory.LazyAttribute(lambda w: w.manager)
    labels_to_watch = factory.LazyFunction(lambda: {"operator.kyma-project.io/watched-by": "kyma"})
    resource_to_watch = factory.LazyFunction(
        lambda: {"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"}
    )
    field = "spec"
    service_info = factory.LazyFunction(lambda: {"name": "events", "namespace": "kcp-system", "port": 8082})
    gateway = factory.LazyFunction(
        lambda: {"selector": {"matchLabels": {"operator.kyma-project.io/watcher-gateway": "default"}}}
    )


class SyncResourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = SyncResource

    kyma = factory.SubFactory(KymaFactory)
    module = factory.SubFactory(ModuleFactory)
    namespace = factory.LazyAttribute(lambda s: s.kyma.namespace)
    name = factory.Sequence(lambda n: f"sync-{n}")
    manifests = SAMPLE_MANIFESTS
