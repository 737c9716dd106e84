"""Reads that serve every Kyma of a batch of periodic reconciles, each made once for the batch.

Beat's sweep queues the periodic reconciles of due Kymas in batches (``controlplane.
kyma_reconcile_batch``, ``RECONCILE_BATCH_SIZE`` Kymas a task: :mod:`reconciler.run`). A no-op
reconcile's database reads were mostly the same for every Kyma (the Watchers, the module
catalog, the CA bundle) or one query per Kyma for few rows (its certificate, ModuleConfigs and
SyncResources): bench/fleet.py's profile put 60 % of a no-op's CPU in the ORM. A batch makes
each of those queries once, for all its Kymas, the first time a reconcile of the batch asks.

What a batch read may be behind: a change made while the batch runs (a few seconds). Every
change made in the control plane asks for a reconcile of its Kymas (an urgent one), which runs
after this one (the lease) and reads afresh; a certificate the reconcile finds due is renewed on
the spot (:func:`certificate`). So a batch never leaves a runtime behind a change for longer
than its own run.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.models import Kyma, Module, ModuleConfig, SyncResource
from fleet.models.compiled import CompiledQuery
from pki import selectors as pki_selectors
from pki import services as pki
from pki.models import Certificate, CertificatePurpose
from watchers.models import Watcher


@dataclass
class SharedReads:
    """The batch's Kymas (``kyma_ids``) and what was read for them, each part on first use."""

    kyma_ids: Sequence[int]
    now: dt.datetime
    _cache: dict[str, Any] = field(default_factory=dict)

    def _once(self, name: str, load: Any) -> Any:
        if name not in self._cache:
            self._cache[name] = load()
        return self._cache[name]

    def watchers(self, load: Any) -> list[Watcher]:
        """The Watchers every runtime gets (``load``: how a single reconcile reads them)."""
        return self._once("watchers", load)

    def catalog(self) -> dict[str, Module]:
        return self._once("catalog", lambda: {module.name: module for module in Module.objects.all()})

    def ca_bundle(self) -> bytes:
        return self._once("bundle", lambda: pki_selectors.ca_bundle_pem(self.now))

    def module_configs(self, kyma: Kyma) -> list[ModuleConfig]:
        return self._once("configs", lambda: self._by_kyma(_CONFIGS)).get(kyma.pk, [])

    def sync_resources(self, kyma: Kyma) -> list[SyncResource]:
        return self._once("syncs", lambda: self._by_kyma(_SYNCS)).get(kyma.pk, [])

    def certificate(self, kyma: Kyma, now: dt.datetime) -> Certificate:
        """The Kyma's runtime certificate as read for the batch, or issued/renewed now when it
        is not current (:func:`pki.services.certificate_for_kyma` decides, reading again)."""
        found = self._once("certificates", self._certificates).get(kyma.pk)
        if pki.certificate_is_current(found, kyma, now):
            return found
        return pki.certificate_for_kyma(kyma=kyma, now=now)

    def _by_kyma(self, query: CompiledQuery) -> dict[int, list[Any]]:
        """The batch's rows of a module's (ModuleConfigs, SyncResources) by Kyma, each with its
        Module from the catalog the batch read (a row whose Module is not there reads it)."""
        modules = {module.pk: module for module in self.catalog().values()}
        grouped: dict[int, list[Any]] = defaultdict(list)
        for row in query.rows(self.kyma_ids):
            if row.module_id in modules:
                row.module = modules[row.module_id]
            grouped[row.kyma_id].append(row)
        return grouped

    def _certificates(self) -> dict[int, Certificate]:
        return {row.kyma_id: row for row in _CERTIFICATES.rows(self.kyma_ids)}


# The batch's reads by Kyma, their SQL compiled once per process (fleet.models.compiled): with
# the few rows of a batch, compiling each query took longer than running it.
_CONFIGS: CompiledQuery[ModuleConfig] = CompiledQuery(lambda: ModuleConfig.objects.all(), "kyma_id")
_SYNCS: CompiledQuery[SyncResource] = CompiledQuery(lambda: SyncResource.objects.all(), "kyma_id")
_CERTIFICATES: CompiledQuery[Certificate] = CompiledQuery(
    lambda: Certificate.objects.select_related("issuer").filter(
        purpose=CertificatePurpose.RUNTIME, superseded_at__isnull=True
    ),
    "kyma_id",
)
