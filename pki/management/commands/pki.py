"""``manage.py pki bootstrap|rotate-ca|export-bundle|issue|status``.

Its writes (a CA made, imported or rotated to, a certificate issued) are recorded in the audit
trail as the operating-system user's, like every command's; a refused one with its reason."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma
from kernel import audit
from kernel.errors import ApplicationError
from pki import selectors, services
from pki.jobs import ca_rotation_start
from pki.models import CertificateAuthority


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    path.chmod(mode)


# The actions that write, and the kind each writes (for a refusal's entry).
WRITES = {"bootstrap": "CertificateAuthority", "rotate-ca": "CertificateAuthority", "issue": "Certificate"}


def _arguments(options: dict[str, Any]) -> list[str]:
    """The command's words after its action, as an audit entry's ``request``."""
    words = [options.get("kyma") or ""]
    for option in ("import_cert", "import_key", "out"):
        if options.get(option):
            words.append(f"--{option.replace('_', '-')} {options[option]}")
    words += ["--renew"] if options.get("renew") else []
    return [word for word in words if word]


class Command(BaseCommand):
    help = "Manage the control plane's certificate authority and certificates."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        boot = sub.add_parser("bootstrap", help="create the CA if none is valid (idempotent), or import one")
        boot.add_argument("--import-cert", type=Path, help="PEM certificate of a CA to import")
        boot.add_argument("--import-key", type=Path, help="PEM private key of that CA")
        rotate = sub.add_parser("rotate-ca", help="start a CA rotation without downtime")
        rotate.add_argument(
            "--yes",
            "--noinput",
            "--no-input",
            dest="yes",
            action="store_true",
            help="do not ask for confirmation (needed without a terminal)",
        )
        export = sub.add_parser("export-bundle", help="print (or write) the trusted CA bundle")
        export.add_argument("--out", type=Path, help="file to write instead of standard output")
        issue = sub.add_parser("issue", help="write ca.crt, tls.crt, tls.key of a Kyma's watcher certificate")
        issue.add_argument(
            "kyma", metavar="NAMESPACE/NAME", help="the Kyma whose runtime gets the certificate"
        )
        issue.add_argument("--out", type=Path, required=True, help="directory for the three files")
        issue.add_argument(
            "--renew", action="store_true", help="issue a new certificate even if the current is fine"
        )
        sub.add_parser("status", help="list the CAs and what each one does now")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        actor = audit.command_actor(" ".join(["manage.py pki", action, *_arguments(options)]))
        try:
            with audit.acting(actor):
                getattr(self, "do_" + action.replace("-", "_"))(options)
        except ApplicationError as exc:
            if action in WRITES:
                kind, name = WRITES[action], options.get("kyma") or ""
                audit.record_refusal(exc, action=action, kind=kind, name=name, actor=actor)
            raise CommandError(exc.message) from exc

    def do_bootstrap(self, options: dict[str, Any]) -> None:
        cert_path, key_path = options["import_cert"], options["import_key"]
        if bool(cert_path) != bool(key_path):
            raise CommandError("--import-cert and --import-key go together")
        try:
            cert_pem = cert_path.read_bytes() if cert_path else None
            key_pem = key_path.read_bytes() if key_path else None
        except OSError as exc:
            raise CommandError(f"cannot read {exc.filename}: {exc.strerror}") from exc
        ca, created = services.ca_bootstrap(import_cert_pem=cert_pem, import_key_pem=key_pem)
        verb = "imported" if created and ca.imported else "created" if created else "already present"
        self.stdout.write(
            f"CA {verb}: {ca.common_name}, fingerprint {ca.fingerprint}, valid until {ca.not_after:%Y-%m-%d}"
        )

    def do_rotate_ca(self, options: dict[str, Any]) -> None:
        if not options["yes"]:
            if not sys.stdin.isatty():
                raise CommandError("no terminal to confirm the rotation on: pass --yes (or --noinput)")
            try:
                answer = input("Start a CA rotation? Every runtime gets a new certificate. [y/N] ")
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                raise CommandError("rotation cancelled")
        job = ca_rotation_start()
        self.stdout.write(
            f"new CA {job.result['ca']} joined the bundle; job {job.pk} re-issues the runtime "
            f"certificates (its progress: the Jobs page of the admin)"
        )

    def do_export_bundle(self, options: dict[str, Any]) -> None:
        bundle = selectors.ca_bundle_pem()
        if not bundle:
            raise CommandError("no valid CA: run `manage.py pki bootstrap` first")
        if options["out"]:
            _write(options["out"], bundle, 0o644)
            self.stdout.write(
                f"wrote {bundle.count(b'BEGIN CERTIFICATE')} CA certificate(s) to {options['out']}"
            )
        else:
            self.stdout.write(bundle.decode(), ending="")

    def do_issue(self, options: dict[str, Any]) -> None:
        namespace, sep, name = options["kyma"].partition("/")
        if not sep or not namespace or not name:
            raise CommandError("name the Kyma as NAMESPACE/NAME")
        kyma = Kyma.objects.filter(namespace=namespace, name=name).first()
        if kyma is None:
            raise CommandError(f"no Kyma {namespace}/{name}")
        if options["renew"]:
            cert = services.certificate_issue_for_kyma(kyma=kyma)
        else:
            cert = services.certificate_for_kyma(kyma=kyma)
        out: Path = options["out"]
        out.mkdir(parents=True, exist_ok=True)
        for filename, data in services.runtime_secret_data(cert).items():
            _write(out / filename, data, 0o600 if filename == "tls.key" else 0o644)
        queue.request([kyma.pk], reason="certificate issued by an operator")
        self.stdout.write(
            f"wrote ca.crt, tls.crt, tls.key for {kyma.key} (certificate {cert.fingerprint}) to {out}"
        )

    def do_status(self, options: dict[str, Any]) -> None:
        now = timezone.now()
        issuing, serving = selectors.issuing_authority(now), selectors.serving_authority(now)
        rows = CertificateAuthority.objects.order_by("-joined_bundle_at")
        if not rows:
            self.stdout.write("no CA yet: run `manage.py pki bootstrap`")
        for ca in rows:
            roles = [r for r, c in (("issuing", issuing), ("serving", serving)) if c and c.pk == ca.pk]
            state = "expired" if ca.is_expired(now) else ", ".join(roles) or "trusted"
            self.stdout.write(f"{ca.fingerprint[:23]}  until {ca.not_after:%Y-%m-%d}  {state}")
