"""``manage.py render_gateway``: the Istio Gateway and one VirtualService per Watcher, for kubectl.

    python manage.py render_gateway --host listener.kcp.example.com | kubectl apply -f -

Watchers being deleted are left out, so a later ``kubectl apply --prune`` (or a manual delete)
removes their routes. Warnings go to standard error so the output stays a clean stream.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel import audit
from kernel.documents import schema
from kernel.documents.yamlio import dump_json, dump_yaml
from pki import gateway as gateway_credential
from pki import services as pki_services
from watchers import gateway as routing
from watchers.models import Watcher, WatcherState

# A Gateway host: a DNS name, optionally with a leading wildcard label (Istio rejects IPs here).
HOST = re.compile(r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)+$")


def _gateway_name(value: str) -> tuple[str, str]:
    namespace, sep, name = value.rpartition("/")
    namespace = namespace if sep else routing.GATEWAY_NAMESPACE
    for part in (namespace, name):
        if not re.fullmatch(schema.DNS_LABEL, part):
            raise CommandError(f"--gateway must be NAME or NAMESPACE/NAME (DNS labels), got {value!r}")
    return namespace, name


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _hosts(given: list[str] | None) -> list[str]:
    """``--host`` values, else the host runtime watchers dial (``WATCHER_KCP_ADDR``)."""
    hosts = given or [settings.WATCHER_KCP_ADDR.rpartition(":")[0] or settings.WATCHER_KCP_ADDR]
    for host in hosts:
        if not HOST.fullmatch(host) or _is_address(host):
            origin = "--host" if given else f"WATCHER_KCP_ADDR ({settings.WATCHER_KCP_ADDR})"
            raise CommandError(f"{origin}: {host!r} is not a DNS name a Gateway can serve; give --host")
    return list(dict.fromkeys(hosts))


def _covered(host: str, names: list[str]) -> bool:
    return host in names or any(n.startswith("*.") and host.endswith(n[1:]) for n in names)


class Command(BaseCommand):
    help = "Print the Istio Gateway and one VirtualService per Watcher (for `kubectl apply -f -`)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml", help="output format")
        parser.add_argument(
            "--gateway",
            default=f"{routing.GATEWAY_NAMESPACE}/{routing.GATEWAY_NAME}",
            help="NAME or NAMESPACE/NAME of the Gateway (default: %(default)s)",
        )
        parser.add_argument(
            "--host",
            action="append",
            help="host runtime watchers dial; repeat for several (default: the host of WATCHER_KCP_ADDR)",
        )
        parser.add_argument(
            "--credential-name",
            default=routing.CREDENTIAL_NAME,
            help="Secret with the listener certificate, key and CA bundle (default: %(default)s)",
        )
        parser.add_argument(
            "--with-credential",
            action="store_true",
            help="also print that Secret, with the listener's current certificate and private key",
        )
        parser.add_argument(
            "--credential-namespace",
            default=routing.CREDENTIAL_NAMESPACE,
            help="namespace of the ingress gateway and its Secret (default: %(default)s)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        namespace, name = _gateway_name(options["gateway"])
        hosts = _hosts(options["host"])
        gateway_doc = routing.gateway(
            hosts=hosts, name=name, namespace=namespace, credential_name=options["credential_name"]
        )
        watchers = Watcher.objects.filter(deletion_timestamp__isnull=True).exclude(
            state=WatcherState.DELETING
        )
        services, unbound = routing.virtual_services(watchers, gateway_doc=gateway_doc)
        documents = [gateway_doc, *services]
        if options["with_credential"]:
            documents.append(self._credential(options, hosts))
        self._warn(services, unbound)
        if options["output"] == "json":
            self.stdout.write(dump_json({"apiVersion": "v1", "kind": "List", "items": documents}), ending="")
        else:
            self.stdout.write(dump_yaml(documents), ending="")

    def _credential(self, options: dict[str, Any], hosts: list[str]) -> dict[str, Any]:
        for host in hosts:
            if not _covered(host, settings.LISTENER_HOSTNAMES):
                self.stderr.write(
                    f"warning: {host} is not in LISTENER_HOSTNAMES: the listener certificate "
                    "in the credential Secret is not valid for it"
                )
        # A CA or listener certificate made on the way (none yet) is this command's write.
        with audit.acting(audit.command_actor("manage.py render_gateway --with-credential")):
            cert, key, bundle = pki_services.listener_material()
        return gateway_credential.credential_secret(
            cert=cert,
            key=key,
            ca_bundle=bundle,
            name=options["credential_name"],
            namespace=options["credential_namespace"],
        )

    def _warn(self, services: list[dict[str, Any]], unbound: list[Watcher]) -> None:
        for watcher in unbound:
            self.stderr.write(
                f"warning: Watcher {watcher.key}: spec.gateway.selector does not match the Gateway's "
                "labels; no VirtualService rendered for it"
            )
        listener = routing.listener_destination().host
        if not any(
            route["destination"]["host"] == listener
            for service in services
            for http in service["spec"]["http"]
            for route in http["route"]
        ):
            self.stderr.write(
                f"warning: no Watcher for component {settings.LISTENER_RECONCILE_COMPONENT!r}: "
                "its WatchEvents and heartbeats have no route to the listener"
            )
