"""Certificate issuance speed.

Reports certificates per second for ECDSA P-256 and RSA 4096 (key generation and signing only),
the per-Kyma service path (one transaction per certificate, as a reconcile issues it) as the
baseline, and the time to issue certificates for 10,000 Kymas with the bulk path (what a CA
rotation job or a fleet import uses), with the ratio to the baseline, and the re-issue of every
certificate after ``manage.py pki rotate-ca`` (the same rotation job as the admin and beat).
Goal: 10,000 ECDSA certificates in under 30 s. The last line is
``pki_issue: ecdsa_per_s=A rsa_per_s=B bulk_s=C bulk_ratio=D reissue_s=E``.

    python bench/pki_issue.py [--kymas 10000] [--rsa 20] [--smoke]
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
import uuid

from common import database_label, parse_args, setup_django

setup_django("pki_issue")

from django.utils import timezone

from fleet.jobs.services import SLICE_SECONDS, job_run
from fleet.models import Kyma
from pki import crypto, services
from pki.jobs import CERTIFICATE_BATCH, ca_rotation_start
from pki.models import Certificate, CertificateAuthority, CertificatePurpose


def crypto_rate(key_type: str, count: int) -> float:
    now = timezone.now()
    ca = crypto.create_ca(common_name="bench", now=now, validity=dt.timedelta(days=90), key_type=key_type)
    started = time.perf_counter()
    for number in range(count):
        crypto.issue_certificate(
            ca=ca,
            common_name=f"rt-{number}",
            dns_names=[f"rt-{number}.example.com"],
            now=now,
            validity=dt.timedelta(days=60),
            key_type=key_type,
        )
    return count / (time.perf_counter() - started)


def fleet(size: int) -> list[Kyma]:
    Certificate.objects.all().delete()
    Kyma.objects.all().delete()
    Kyma.objects.bulk_create(
        [
            Kyma(
                uid=uuid.uuid4(),
                namespace="kcp-system",
                name=f"c-{n:06d}",
                runtime_id=f"rt-{n:06d}",
                skr_domain=f"c-{n:06d}.kyma.example.com",
            )
            for n in range(size)
        ],
        batch_size=2000,
    )
    return list(Kyma.objects.order_by("pk"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kymas", type=int, default=10_000)
    parser.add_argument("--baseline", type=int, default=1_000, help="Kymas for the one-by-one baseline")
    parser.add_argument("--ecdsa", type=int, default=2_000, help="certificates for the ECDSA crypto rate")
    parser.add_argument("--rsa", type=int, default=20, help="certificates for the RSA 4096 crypto rate")
    args = parse_args(parser, smoke={"kymas": 30, "baseline": 10, "ecdsa": 20, "rsa": 1})
    print(f"database: {database_label()}")

    ecdsa = crypto_rate("ecdsa-p256", args.ecdsa)
    rsa = crypto_rate("rsa-4096", args.rsa)
    print(f"crypto only, ECDSA P-256: {ecdsa:9.1f} certificates/s")
    print(f"crypto only, RSA 4096:    {rsa:9.1f} certificates/s   (ECDSA is x{ecdsa / rsa:.0f} faster)")

    services.ca_bootstrap()
    kymas = fleet(args.baseline)
    started = time.perf_counter()
    for kyma in kymas:
        services.certificate_issue_for_kyma(kyma=kyma)
    one_by_one = len(kymas) / (time.perf_counter() - started)
    print(
        f"service, one by one ({len(kymas):,} Kymas, stored encrypted): "
        f"{one_by_one:7.1f} certificates/s  [baseline]"
    )

    kymas = fleet(args.kymas)
    started = time.perf_counter()
    issued = services.certificates_issue_bulk(kymas=kymas)
    seconds = time.perf_counter() - started
    assert issued == len(kymas) == Certificate.objects.filter(superseded_at__isnull=True).count()
    print(
        f"service, bulk ({issued:,} Kymas, stored encrypted): {seconds:6.2f} s = {issued / seconds:7.1f} "
        f"certificates/s, x{issued / seconds / one_by_one:.2f} the baseline   goal: < 30 s"
    )

    reissued = reissue_after_ca_rotation(len(kymas))
    print(
        f"pki_issue: ecdsa_per_s={ecdsa:.1f} rsa_per_s={rsa:.2f} bulk_s={seconds:.2f} "
        f"bulk_ratio={issued / seconds / one_by_one:.2f} reissue_s={reissued:.2f}"
    )


def reissue_after_ca_rotation(size: int) -> float:
    """What ``manage.py pki rotate-ca``, the admin and beat start: ``pki.jobs.ca_rotation_start``
    (a new CA joins the bundle at once), then the job's slices re-issue every runtime certificate
    of an older CA in bulk batches and queue the reconciles that deliver them (run here in
    process, slice after slice, as the worker would)."""
    started = time.perf_counter()
    job = ca_rotation_start()
    rotated = time.perf_counter() - started
    slices = 0
    while job_run(job_id=job.pk, budget_seconds=SLICE_SECONDS) is not None:
        slices += 1
    seconds = time.perf_counter() - started
    job.refresh_from_db()
    ca = CertificateAuthority.objects.get(fingerprint=job.result["ca"])
    current = Certificate.objects.filter(superseded_at__isnull=True, purpose=CertificatePurpose.RUNTIME)
    assert job.result["reissued"] == size == current.filter(issuer=ca).count() == current.count(), job.message
    print(
        f"re-issue all after a CA rotation ({size:,}, the rotation job: rotate {rotated:.2f} s, then "
        f"{slices + 1} slice(s) in batches of {CERTIFICATE_BATCH}): {seconds:6.2f} s"
    )
    return seconds


if __name__ == "__main__":
    main()
