"""The control plane's certificate authority: policy, storage, issuance, renewal, rotation.

Every function takes ``now`` (default: the real clock) so rotation can be driven step by step in
tests. Crypto is delegated to :mod:`pki.crypto`; this module decides *which* CA issues *what*,
*when* it is renewed, and what the runtimes and the listener trust.

Rotation without downtime, in order:

1. ``ca_rotate`` creates a new CA. It joins the bundle at once (``joined_bundle_at``) and issues
   every new certificate from then on; runtime certificates from older CAs become due, so each
   runtime receives a new certificate *and the new bundle* on its next reconcile.
2. Until ``serving_from`` (= joined + ``PKI_CA_GRACE_DAYS``) the listener keeps presenting a
   server certificate from the previous CA, which runtimes that were not re-issued yet still
   trust; the listener accepts client certificates from every CA in the bundle meanwhile.
3. From ``serving_from`` the listener presents a certificate from the new CA.
4. A CA leaves the bundle when it expires.

A CA made, imported or rotated to, and a certificate issued or renewed, through a door (the
admin's *Renew now* and *Rotate*, ``manage.py pki``) is in the audit trail: its fingerprint,
serial and validity, and the one it replaces; never a private key. The control plane's own
issuing (reconciles, beat) has no actor and is told by the timeline instead.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleet.models import Kyma, RevisionCounter
from kernel import audit
from kernel.errors import ApplicationError
from kernel.sealing import Sealed
from kernel.timefmt import rfc3339

from . import crypto, selectors
from .models import Certificate, CertificateAuthority, CertificatePurpose

log = logging.getLogger(__name__)

WEBHOOK_SERVICE_NAMES = ("skr-webhook.kyma-system.svc", "skr-webhook.kyma-system.svc.cluster.local")


class PKIError(ApplicationError):
    """A certificate cannot be issued (e.g. a Kyma without ``skr_domain``)."""

    code = "pki"


@dataclass(frozen=True)
class Policy:
    ca_key_type: str
    ca_validity: dt.timedelta
    ca_common_name: str
    ca_subject: crypto.SubjectFields
    ca_rotate_before: dt.timedelta
    ca_grace: dt.timedelta
    cert_key_type: str
    cert_validity: dt.timedelta
    cert_renew_before: dt.timedelta
    extra_dns_names: tuple[str, ...]
    listener_hostnames: tuple[str, ...]


def policy() -> Policy:
    return Policy(
        ca_key_type=settings.PKI_CA_KEY_TYPE,
        ca_validity=dt.timedelta(days=settings.PKI_CA_VALIDITY_DAYS),
        ca_common_name=settings.PKI_CA_COMMON_NAME,
        ca_subject=crypto.SubjectFields(
            organization=settings.PKI_CA_ORGANIZATION,
            organizational_unit=settings.PKI_CA_ORGANIZATIONAL_UNIT,
            country=settings.PKI_CA_COUNTRY,
            locality=settings.PKI_CA_LOCALITY,
        ),
        ca_rotate_before=dt.timedelta(days=settings.PKI_CA_ROTATE_BEFORE_DAYS),
        ca_grace=dt.timedelta(days=settings.PKI_CA_GRACE_DAYS),
        cert_key_type=settings.PKI_CERT_KEY_TYPE,
        cert_validity=dt.timedelta(days=settings.PKI_CERT_VALIDITY_DAYS),
        cert_renew_before=dt.timedelta(days=settings.PKI_CERT_RENEW_BEFORE_DAYS),
        extra_dns_names=tuple(settings.PKI_EXTRA_DNS_NAMES),
        listener_hostnames=tuple(settings.LISTENER_HOSTNAMES),
    )


def _now(now: dt.datetime | None) -> dt.datetime:
    return now or timezone.now()


def _mutex() -> None:
    """Serialize CA changes across processes (a row lock held until the transaction ends)."""
    RevisionCounter.next("pki-mutex")


def keypair(material: CertificateAuthority | Certificate) -> crypto.KeyPair:
    return crypto.KeyPair(
        crypto.load_certificate(material.certificate_pem.encode()),
        crypto.load_private_key(material.private_key.reveal_bytes()),
    )


def expected_dns_names(kyma: Kyma) -> list[str]:
    return list(dict.fromkeys([kyma.skr_domain, *policy().extra_dns_names, *WEBHOOK_SERVICE_NAMES]))


# --- certificate authorities ------------------------------------------------------------------


def _stored_fields(pair: crypto.KeyPair) -> dict[str, object]:
    """What a CA row and a certificate row both keep of a key pair (the key sealed)."""
    cert = pair.certificate
    return {
        "common_name": crypto.common_name(cert),
        "serial": crypto.serial_hex(cert),
        "fingerprint": crypto.fingerprint_sha256(cert),
        "key_type": crypto.key_type_of(cert),
        "certificate_pem": pair.certificate_pem.decode(),
        "private_key": Sealed.seal(pair.private_key_pem),
        "not_before": cert.not_valid_before_utc,
        "not_after": cert.not_valid_after_utc,
    }


def _store_ca(
    pair: crypto.KeyPair, *, joined: dt.datetime, serving_from: dt.datetime, imported: bool
) -> CertificateAuthority:
    return CertificateAuthority.objects.create(
        **_stored_fields(pair),
        joined_bundle_at=joined,
        serving_from=serving_from,
        imported=imported,
    )


def _audit(
    material: CertificateAuthority | Certificate, action: str, replaced: object = None, **facts: object
) -> None:
    """Record ``material`` made through a door: what identifies it, never its key. ``replaced``:
    the fingerprint of the one it takes the place of."""
    shown = {
        "fingerprint": (replaced, material.fingerprint),
        "serial": (None, material.serial),
        "not_after": (None, rfc3339(material.not_after)),
        **{field: (None, value) for field, value in facts.items()},
    }
    audit.record_object(
        material,
        action=action,
        changes=[{"field": field, "before": old, "after": new} for field, (old, new) in shown.items()],
    )


def _new_ca(now: dt.datetime) -> crypto.KeyPair:
    rules = policy()
    return crypto.create_ca(
        common_name=rules.ca_common_name,
        now=now,
        validity=rules.ca_validity,
        key_type=rules.ca_key_type,  # type: ignore[arg-type]
        subject=rules.ca_subject,
    )


def import_ca_pair(cert_pem: bytes, key_pem: bytes, *, now: dt.datetime) -> crypto.KeyPair:
    """Check an operator-supplied CA: one certificate, its key, a CA that can sign, still valid."""
    try:
        pair = crypto.KeyPair(crypto.load_certificate(cert_pem), crypto.load_private_key(key_pem))
    except crypto.CertificateError as exc:
        raise PKIError(f"cannot import the CA: {exc}") from exc
    if not crypto.public_key_matches(pair.certificate, pair.private_key):
        raise PKIError("cannot import the CA: the private key does not belong to the certificate")
    try:
        constraints = pair.certificate.extensions.get_extension_for_class(crypto.x509.BasicConstraints).value
    except crypto.x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise PKIError("cannot import the CA: the certificate is not a CA (basicConstraints CA:TRUE missing)")
    if pair.certificate.not_valid_after_utc <= now:
        raise PKIError("cannot import the CA: it has expired")
    return pair


@transaction.atomic
def ca_bootstrap(
    *,
    now: dt.datetime | None = None,
    import_cert_pem: bytes | None = None,
    import_key_pem: bytes | None = None,
) -> tuple[CertificateAuthority, bool]:
    """Make sure a usable CA exists (idempotent). Returns (issuing CA, created)."""
    now = _now(now)
    _mutex()
    current = selectors.issuing_authority(now)
    if current is not None and import_cert_pem is None:
        return current, False
    if import_cert_pem is not None:
        pair = import_ca_pair(import_cert_pem, import_key_pem or b"", now=now)
        if CertificateAuthority.objects.filter(
            fingerprint=crypto.fingerprint_sha256(pair.certificate)
        ).exists():
            return CertificateAuthority.objects.get(
                fingerprint=crypto.fingerprint_sha256(pair.certificate)
            ), False
        if current is not None:
            ca = _rotate_to(pair, now=now, imported=True)
            _audit(ca, "import", current.fingerprint, serving_from=rfc3339(ca.serving_from))
            return ca, True
        ca = _store_ca(pair, joined=now, serving_from=now, imported=True)
        _audit(ca, "import")
        return ca, True
    # The first CA (or one after every CA expired): nothing older to be gentle with.
    ca = _store_ca(_new_ca(now), joined=now, serving_from=now, imported=False)
    log.info("created CA %s (%s), valid until %s", ca.common_name, ca.fingerprint, ca.not_after)
    _audit(ca, "create")
    return ca, True


def _rotate_to(pair: crypto.KeyPair, *, now: dt.datetime, imported: bool) -> CertificateAuthority:
    ca = _store_ca(pair, joined=now, serving_from=now + policy().ca_grace, imported=imported)
    due = Certificate.objects.filter(purpose=CertificatePurpose.RUNTIME, superseded_at__isnull=True).exclude(
        issuer=ca
    )
    count = due.update(renew_after=now)
    log.info(
        "rotated to CA %s; %d runtime certificate(s) will be re-issued; listener switches at %s",
        ca.fingerprint,
        count,
        ca.serving_from,
    )
    return ca


@transaction.atomic
def ca_rotate(*, now: dt.datetime | None = None) -> CertificateAuthority:
    """Start a CA rotation (see the module docstring)."""
    now = _now(now)
    _mutex()
    current = selectors.issuing_authority(now)
    if current is None:
        return ca_bootstrap(now=now)[0]
    ca = _rotate_to(_new_ca(now), now=now, imported=False)
    _audit(ca, "rotate", current.fingerprint, serving_from=rfc3339(ca.serving_from))
    return ca


def ca_rotation_due(now: dt.datetime | None = None) -> bool:
    now = _now(now)
    issuing = selectors.issuing_authority(now)
    return issuing is None or issuing.not_after - now <= policy().ca_rotate_before


# --- leaf certificates --------------------------------------------------------------------------


def _issue(
    *,
    ca: CertificateAuthority,
    common_name: str,
    names: Sequence[str],
    now: dt.datetime,
    server: bool,
    client: bool,
) -> crypto.KeyPair:
    rules = policy()
    return crypto.issue_certificate(
        ca=keypair(ca),
        common_name=common_name,
        dns_names=names,
        now=now,
        validity=rules.cert_validity,
        key_type=rules.cert_key_type,  # type: ignore[arg-type]
        server=server,
        client=client,
    )


def _certificate_row(pair: crypto.KeyPair, **fields: object) -> Certificate:
    cert = pair.certificate
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    renew_before = min(policy().cert_renew_before, lifetime / 2)
    return Certificate(
        **_stored_fields(pair),
        dns_names=crypto.dns_names(cert),
        renew_after=cert.not_valid_after_utc - renew_before,
        **fields,
    )


def _require_identity(kyma: Kyma) -> None:
    if not kyma.skr_domain:
        raise PKIError(
            f"Kyma {kyma.key} has no skr_domain (annotation skr-domain): "
            "its watcher certificate needs it as SAN",
            errors=[("skr_domain", "required for the runtime watcher certificate")],
        )
    if not kyma.runtime_id:
        raise PKIError(f"Kyma {kyma.key} has no runtime id: its watcher certificate needs it as CN")


def certificate_is_current(cert: Certificate | None, kyma: Kyma, now: dt.datetime) -> bool:
    """Usable as is: not due, from a CA still in the bundle, naming this Kyma as it is now."""
    return (
        cert is not None
        and cert.renew_after > now
        and cert.issuer.not_after > now
        and cert.common_name == kyma.runtime_id
        and cert.dns_names == expected_dns_names(kyma)
    )


@transaction.atomic
def certificate_issue_for_kyma(*, kyma: Kyma, now: dt.datetime | None = None) -> Certificate:
    """Issue a fresh runtime certificate for ``kyma`` and supersede the previous one."""
    now = _now(now)
    _require_identity(kyma)
    ca = selectors.issuing_authority(now) or ca_bootstrap(now=now)[0]
    list(
        Kyma.objects.select_for_update().filter(pk=kyma.pk).values_list("pk")
    )  # one issuer per Kyma at a time
    current = Certificate.objects.filter(
        kyma=kyma, purpose=CertificatePurpose.RUNTIME, superseded_at__isnull=True
    )
    # Only a door's issue is recorded: the reconciles' own cost no query for it.
    replaced = current.values_list("fingerprint", flat=True).first() if audit.current_actor() else None
    current.update(superseded_at=now)
    pair = _issue(
        ca=ca, common_name=kyma.runtime_id, names=expected_dns_names(kyma), now=now, server=True, client=True
    )
    cert = _certificate_row(pair, purpose=CertificatePurpose.RUNTIME, kyma=kyma, issuer=ca)
    cert.save()
    _audit(cert, "renew" if replaced else "issue", replaced)
    return cert


def certificate_for_kyma(*, kyma: Kyma, now: dt.datetime | None = None) -> Certificate:
    """The Kyma's current runtime certificate, issued or renewed when needed."""
    now = _now(now)
    _require_identity(kyma)
    current = selectors.current_runtime_certificate(kyma)
    if certificate_is_current(current, kyma, now):
        return current  # type: ignore[return-value]
    return certificate_issue_for_kyma(kyma=kyma, now=now)


def certificates_issue_bulk(*, kymas: Sequence[Kyma], now: dt.datetime | None = None) -> int:
    """Issue runtime certificates for many Kymas in few transactions (first issue, rotations)."""
    now = _now(now)
    ca = selectors.issuing_authority(now) or ca_bootstrap(now=now)[0]
    ca_pair = keypair(ca)
    rules = policy()
    issued = 0
    for start in range(0, len(kymas), 500):
        chunk = [kyma for kyma in kymas[start : start + 500] if kyma.skr_domain and kyma.runtime_id]
        rows = []
        for kyma in chunk:
            pair = crypto.issue_certificate(
                ca=ca_pair,
                common_name=kyma.runtime_id,
                dns_names=expected_dns_names(kyma),
                now=now,
                validity=rules.cert_validity,
                key_type=rules.cert_key_type,  # type: ignore[arg-type]
            )
            rows.append(_certificate_row(pair, purpose=CertificatePurpose.RUNTIME, kyma=kyma, issuer=ca))
        with transaction.atomic():
            Certificate.objects.filter(
                kyma__in=chunk, purpose=CertificatePurpose.RUNTIME, superseded_at__isnull=True
            ).update(superseded_at=now)
            Certificate.objects.bulk_create(rows)
        issued += len(rows)
    return issued


def certificates_renew_due(*, now: dt.datetime | None = None, limit: int | None = None) -> list[int]:
    """Renew due runtime certificates; returns the Kymas whose runtime must get the new Secret."""
    now = _now(now)
    renewed = []
    for kyma in Kyma.objects.filter(
        pk__in=selectors.certificates_due(now, limit or settings.PKI_RENEW_BATCH)
    ):
        try:
            certificate_issue_for_kyma(kyma=kyma, now=now)
        except PKIError as exc:
            log.warning("cannot renew the certificate of %s: %s", kyma.key, exc)
            continue
        renewed.append(kyma.pk)
    return renewed


def listener_certificate_renew(*, now: dt.datetime | None = None) -> Certificate:
    """Replace the listener's server certificate now (listeners pick it up within seconds)."""
    return listener_certificate(now=now, force=True)


def listener_certificate(*, now: dt.datetime | None = None, force: bool = False) -> Certificate:
    """The listener's server certificate from the serving CA, issued or renewed when needed."""
    now = _now(now)
    hostnames = list(policy().listener_hostnames)
    current = (
        Certificate.objects.select_related("issuer")
        .filter(purpose=CertificatePurpose.LISTENER, superseded_at__isnull=True)
        .first()
    )
    serving = selectors.serving_authority(now)
    if (
        not force
        and current is not None
        and serving is not None
        and current.issuer_id == serving.pk
        and current.renew_after > now
        and current.dns_names == hostnames
    ):
        return current
    with transaction.atomic():
        _mutex()  # several listener processes refresh at once: only one issues
        latest = Certificate.objects.filter(
            purpose=CertificatePurpose.LISTENER, superseded_at__isnull=True
        ).first()
        if not force and latest is not None and current is not None and latest.pk != current.pk:
            return latest  # another process renewed it meanwhile
        serving = serving or ca_bootstrap(now=now)[0]
        Certificate.objects.filter(purpose=CertificatePurpose.LISTENER, superseded_at__isnull=True).update(
            superseded_at=now
        )
        pair = _issue(
            ca=serving, common_name=hostnames[0], names=hostnames, now=now, server=True, client=False
        )
        cert = _certificate_row(pair, purpose=CertificatePurpose.LISTENER, issuer=serving)
        cert.save()
        replaced = latest.fingerprint if latest is not None else None
        _audit(cert, "renew" if replaced else "issue", replaced)
    log.info("issued listener certificate %s from CA %s", cert.fingerprint, serving.fingerprint)
    return cert


def runtime_secret_data(cert: Certificate, *, now: dt.datetime | None = None) -> dict[str, bytes]:
    """The three files of a runtime's ``skr-webhook-tls`` Secret."""
    return {
        "ca.crt": selectors.ca_bundle_pem(now),
        "tls.crt": cert.certificate_pem.encode(),
        "tls.key": cert.private_key.reveal_bytes(),
    }


def listener_material() -> tuple[bytes, bytes, bytes]:
    """(certificate, key, CA bundle) the listener serves with now, issued if needed."""
    ca_bootstrap()
    cert = listener_certificate()
    return cert.certificate_pem.encode(), cert.private_key.reveal_bytes(), selectors.ca_bundle_pem()
