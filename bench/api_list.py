"""Kyma list API page and admin changelist at fleet sizes up to 10,000 Kymas.

Reports the median and p95 server time (in-process, Django test client) and the number of SQL
queries of one page, for a baseline fleet of 100 Kymas and for 1,000 and 10,000, and the ratio of
each to the baseline. Goal: under 150 ms, and the same number of queries whatever the size. The
last line is ``api_list: api_ms=X admin_ms=Y queries_constant=yes|no`` (medians at the largest size).

    python bench/api_list.py [--sizes 100,1000,10000] [--repeat 30] [--smoke]
"""

from __future__ import annotations

import argparse
import uuid

from common import database_label, measure_page, parse_args, setup_django, summary

setup_django("api_list", static=True)

from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token

from fleet.models import Kyma

STATES = ["Ready"] * 16 + ["Processing", "Warning", "Error", ""]
CONDITIONS = [
    {
        "type": "SKRWebhook",
        "status": "True",
        "reason": "Ready",
        "message": "webhook ready",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    },
    {
        "type": "Modules",
        "status": "True",
        "reason": "Ready",
        "message": "modules ready",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    },
]


def seed(total: int) -> None:
    """Grow (or shrink) the fleet to ``total`` realistic Kymas."""
    have = Kyma.objects.count()
    if have > total:
        Kyma.objects.filter(pk__in=Kyma.objects.order_by("-pk").values("pk")[: have - total]).delete()
        return
    batch = []
    for number in range(have, total):
        name = f"c-{number:06d}"
        batch.append(
            Kyma(
                uid=uuid.uuid4(),
                namespace="kcp-system",
                name=name,
                runtime_id=f"rt-{number:06d}",
                skr_domain=f"{name}.kyma.example.com",
                channel="fast" if number % 5 == 0 else "regular",
                modules=[
                    {"name": "keda", "customResourcePolicy": "CreateAndDelete", "managed": True},
                    {"name": "btp-operator", "customResourcePolicy": "CreateAndDelete", "managed": True},
                ],
                state=STATES[number % len(STATES)],
                conditions=CONDITIONS,
                module_status=[{"name": "keda", "state": "Ready", "channel": "regular", "version": "1.0.0"}],
                labels={"kyma-project.io/global-account-id": f"ga-{number % 300}"},
            )
        )
        if len(batch) == 2000:
            Kyma.objects.bulk_create(batch)
            batch = []
    Kyma.objects.bulk_create(batch)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--repeat", type=int, default=30)
    args = parse_args(parser, smoke={"sizes": "20,40", "repeat": 2})
    sizes = [int(s) for s in args.sizes.split(",")]

    users = get_user_model()
    admin = users.objects.filter(username="bench").first() or users.objects.create_superuser(
        "bench", "", "bench-pw"
    )
    token = Token.objects.get_or_create(user=admin)[0].key
    api = Client()
    web = Client()
    web.force_login(admin)

    pages = {
        "API   GET /api/v1/kymas/ (100 per page)": (
            api,
            "/api/v1/kymas/",
            {"HTTP_AUTHORIZATION": f"Token {token}"},
        ),
        "API   GET /api/v1/kymas/?state=Error": (
            api,
            "/api/v1/kymas/?state=Error",
            {"HTTP_AUTHORIZATION": f"Token {token}"},
        ),
        "admin Kyma changelist (50 per page)": (web, "/admin/controlplane/kyma/", {}),
        "admin Kyma changelist, search": (web, "/admin/controlplane/kyma/?q=c-0001", {}),
    }
    print(f"database: {database_label()}")
    results: dict[str, dict[int, tuple[float, int]]] = {name: {} for name in pages}
    for size in sizes:
        seed(size)
        print(f"\n--- fleet of {Kyma.objects.count():,} Kymas")
        for name, (client, path, headers) in pages.items():
            samples, queries = measure_page(client, path, args.repeat, **headers)
            results[name][size] = (sorted(samples)[len(samples) // 2], queries)
            print(f"{name:45s} {summary(samples)}   {queries} queries")

    baseline = sizes[0]
    print(f"\nratio to the {baseline:,}-Kyma baseline (median time; queries)")
    for name, by_size in results.items():
        cells = [
            f"{size:,}: x{by_size[size][0] / by_size[baseline][0]:.2f}; {by_size[size][1]}q"
            for size in sizes[1:]
        ]
        constant = len({q for _, q in by_size.values()}) == 1
        print(f"{name:45s} {'   '.join(cells)}   queries constant: {'yes' if constant else 'NO'}")
    api, admin = (results[name][sizes[-1]][0] for name in list(results)[0:3:2])
    constant = all(len({q for _, q in by_size.values()}) == 1 for by_size in results.values())
    print(f"api_list: api_ms={api:.1f} admin_ms={admin:.1f} queries_constant={'yes' if constant else 'no'}")


if __name__ == "__main__":
    main()
