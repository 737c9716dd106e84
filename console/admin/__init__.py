"""The Django admin: the window onto the fleet."""

from . import catalog, jobs, kyma, records, rollouts  # noqa: F401 - registers the model admins
