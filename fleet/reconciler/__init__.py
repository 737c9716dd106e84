"""The reconcile engine: make what each Kyma says true in its runtime."""

from .engine import Scope, kyma_reconcile
from .status import Outcome, next_interval

__all__ = ["Outcome", "Scope", "kyma_reconcile", "next_interval"]
