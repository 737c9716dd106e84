"""The Django admin: the window onto the fleet."""

# Order matters for ``certificates``: it extends pki's certificate admin, which imports
# ``common`` from here (the admin autodiscovery imports this package before ``pki.admin``).
from . import catalog, certificates, jobs, kyma, records  # noqa: F401 - registers the model admins
