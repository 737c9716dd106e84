"""The certificate list with the dashboard's "needs attention" filter.

``pki.admin`` owns the certificate admin; this extends it (everything else stays as pki defines
it) with the filter the dashboard's expiring/overdue figures link to.
"""

from __future__ import annotations

from django.contrib import admin

from pki.admin import CertificateAdmin
from pki.models import Certificate

from .filters import CertificateAttentionFilter


class FleetCertificateAdmin(CertificateAdmin):
    list_filter = (CertificateAttentionFilter, *CertificateAdmin.list_filter)


if admin.site.is_registered(Certificate):
    admin.site.unregister(Certificate)
admin.site.register(Certificate, FleetCertificateAdmin)
