"""factory_boy factories for the domain models (valid by default, override what a test needs)."""

import factory

from fleet.models import Kyma, Module, SyncResource
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
