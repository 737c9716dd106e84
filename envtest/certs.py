"""What a kube-apiserver needs to start, the way envtest prepares it: a CA that signs the serving
certificate (and client certificates), bearer tokens of an administrator in ``system:masters``, of
the controller manager and of the node stand-in, and the key that signs service-account tokens.
Files go into the server's own directory."""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from pki import crypto

VALIDITY = dt.timedelta(days=2)
ADMIN_USER = "envtest-admin"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"  # bound by the bootstrap RBAC roles
NODE_USER = "system:node:envtest-node"
# user -> groups of the static tokens; the node stand-in acts as scheduler and kubelet at once,
# so it gets the administrator's rights (and system:nodes, which the audit policy leaves out).
IDENTITIES = {
    ADMIN_USER: "system:masters",
    CONTROLLER_MANAGER_USER: "",
    NODE_USER: "system:masters,system:nodes",
}


@dataclass(frozen=True)
class ServerFiles:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    service_account_public_key: Path
    tokens: Path
    token_of: dict[str, str]

    @property
    def admin_token(self) -> str:
        return self.token_of[ADMIN_USER]

    @property
    def ca_pem(self) -> bytes:
        return self.ca_cert.read_bytes()


def server_files(directory: Path, *, hosts: list[str]) -> ServerFiles:
    """Write a fresh CA, a serving certificate for ``hosts``, a service-account signing key and a
    static token file with the administrator, into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca = crypto.create_ca(common_name="envtest-ca", now=now, validity=VALIDITY)
    serving = crypto.issue_certificate(
        ca=ca, common_name="kube-apiserver", dns_names=hosts, now=now, validity=VALIDITY, client=False
    )
    service_account = crypto.generate_private_key("ecdsa-p256")
    token_of = {user: secrets.token_hex(24) for user in IDENTITIES}
    files = ServerFiles(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        service_account_key=directory / "sa.key",
        service_account_public_key=directory / "sa.pub",
        tokens=directory / "tokens.csv",
        token_of=token_of,
    )
    _write(files.ca_cert, ca.certificate_pem)
    _write(files.ca_key, ca.private_key_pem)
    _write(files.serving_cert, serving.certificate_pem)
    _write(files.serving_key, serving.private_key_pem)
    _write(files.service_account_key, crypto.private_key_to_pem(service_account))
    _write(
        files.service_account_public_key,
        service_account.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    # token,user,uid,"group1,group2": the static token authenticator's format.
    lines = [f'{token_of[user]},{user},{user},"{groups}"' for user, groups in IDENTITIES.items()]
    _write(files.tokens, ("\n".join(lines) + "\n").encode())
    return files


def _write(path: Path, content: bytes) -> None:
    path.write_bytes(content)
    path.chmod(0o600)
