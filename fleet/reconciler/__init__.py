"""The reconcile engine: make what each Kyma says true in its runtime."""

from .engine import Outcome, kyma_reconcile, next_interval

__all__ = ["Outcome", "kyma_reconcile", "next_interval"]
