"""Leases: which one of several processes of a role does the work that must be done once.

Shaped after Kubernetes' ``coordination.k8s.io/v1`` Lease (holder, acquire and renew times,
duration, transitions): one row per lease name, rows never deleted. ``term`` grows by one each
time the lease changes hands (or is taken again after it ran out), so a holder that lost it while
paused can never act for the term it held: every fenced write names its term
(:mod:`controlplane.leases`). Times are the database's clock, the one clock every host shares.
"""

from __future__ import annotations

from django.db import models


class Lease(models.Model):
    """A named lease: who holds it (``host:pid``), in which term, since when and until when."""

    name = models.CharField(max_length=63, unique=True)
    holder = models.CharField(max_length=255, blank=True)
    term = models.PositiveBigIntegerField(default=0)
    acquired_at = models.DateTimeField(null=True, blank=True)
    renewed_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name}: {self.holder or 'nobody'} (term {self.term})"
