"""Where the workers' CPU goes: py-spy's samples of busy threads, sorted into the parts of a reconcile.

``bench/fleet.py --profile DIR`` has py-spy (``pip install py-spy``; not a dependency of the
project) sample the thread holding each worker process's GIL while a no-op sweep runs (``--gil``:
a thread waiting on a socket or the database holds no GIL and is not counted), as collapsed
stacks (one line per distinct stack: ``frame;frame;... count``, outermost first).
:func:`breakdown` sorts every sample into one part, looking from the innermost frame outwards
for the first frame that says which:

- ``TLS``: the ``ssl`` module (reads, writes, handshakes of the runtime connections);
- ``JSON of runtime answers``: ``json`` called from the runtime client (``fleet/k8s``);
- ``ORM and SQL``: Django's ``db`` package and the PostgreSQL driver (JSON columns included);
- ``HTTP client``: ``urllib3``, ``http.client`` and the ``kubernetes`` package;
- ``Celery task overhead``: ``celery``, ``kombu``, ``billiard``, ``vine`` and the broker's Redis
  client (the queue marks' Redis calls under ``fleet/queue`` count as ``queue marks``);
- ``hashing and crypto``: ``hashlib``, ``hmac``, ``cryptography``, the content hashes and sealing;
- ``YAML``: ``yaml``;
- ``our own Python``: the project's packages (by top package, in the detail);
- ``other``: the rest (logging, threading, the interpreter's own).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

PROJECT = ("reconciler", "fleet", "watchers", "pki", "kernel", "listener", "controlplane", "console")
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<path>[^()]*?)(?::(?P<line>\d+))?\)$")
# py-spy names the files of fleet's subpackages without the "fleet/" ("k8s/client.py",
# "queue/lease.py"); no other package on the path has a package of these names.
_FLEET_PACKAGES = frozenset(
    entry.name for entry in (Path(__file__).resolve().parent.parent / "fleet").iterdir() if entry.is_dir()
) - {"__pycache__"}


def _path(frame: str) -> str:
    match = _FRAME.match(frame)
    path = (match.group("path") if match else frame).replace("\\", "/")
    return f"fleet/{path}" if path.split("/", 1)[0] in _FLEET_PACKAGES and "/" in path else path


def _package(path: str) -> str:
    """The top package of a frame's file as py-spy names it, relative to its ``sys.path`` entry
    (``django/db/models/query.py`` -> ``django``, ``copy.py`` -> ``copy``); a full path (a file
    outside ``sys.path``) by its ``site-packages`` or project part."""
    if "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif path.startswith("/"):
        parts = [p for p in path.split("/") if p]
        path = "/".join(parts[next((i for i, p in enumerate(parts) if p in PROJECT), len(parts) - 1) :])
    return path.split("/", 1)[0].removesuffix(".py")


def part_of(stack: list[str]) -> tuple[str, str]:
    """(part, detail) of one sample's stack (outermost frame first)."""
    paths = [_path(frame) for frame in stack]
    packages = [_package(path) for path in paths]
    inner_project = next((p for p in reversed(packages) if p in PROJECT), "")
    for index in range(len(packages) - 1, -1, -1):
        package, path = packages[index], paths[index]
        outer = packages[:index]
        if package in ("ssl", "_ssl"):
            return "TLS", "ssl"
        if package == "json":
            if any(p == "django" for p in outer[-6:]) or "psycopg" in outer:
                return "ORM and SQL", "JSON columns"
            if any(p.startswith("fleet/k8s") for p in paths[:index]):
                return "JSON of runtime answers", "json"
            continue
        if package in ("django", "psycopg", "psycopg_binary", "psycopg_pool"):
            if package == "django" and "/db/" not in path:
                continue
            return "ORM and SQL", package
        if package in ("urllib3", "kubernetes", "http", "socket", "selectors"):
            if package in ("socket", "selectors") and "redis" in outer:
                continue
            return "HTTP client", package
        if package == "redis":
            if any(p.startswith("fleet/queue") for p in paths[:index]):
                return "queue marks (Redis)", "redis"
            return "Celery task overhead", "redis (broker)"
        if package in ("celery", "kombu", "billiard", "vine", "amqp"):
            return "Celery task overhead", package
        if package in ("hashlib", "hmac", "cryptography", "_hashlib", "base64", "copy") and package != "copy":
            return "hashing and crypto", package
        if package == "yaml":
            return "YAML", "yaml"
        if package in PROJECT:
            if "documents/hashing" in path or "sealing" in path:
                return "hashing and crypto", path
            return "our own Python", path
    if inner_project:
        return "our own Python", inner_project
    return "other", packages[-1] if packages else "?"


def read_collapsed(files: list[Path]) -> Counter[tuple[str, ...]]:
    stacks: Counter[tuple[str, ...]] = Counter()
    for file in files:
        for line in file.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                # py-spy's first frame names the thread ("process 123:\"...\"") or not: frames
                # without a file in brackets are kept, they fall into "other"
                stacks[tuple(stack.split(";"))] += int(count)
    return stacks


def breakdown(files: list[Path]) -> tuple[int, Counter[str], Counter[tuple[str, str]]]:
    """(samples, samples by part, samples by (part, detail)) of py-spy's collapsed stacks."""
    stacks = read_collapsed(files)
    parts: Counter[str] = Counter()
    details: Counter[tuple[str, str]] = Counter()
    for stack, count in stacks.items():
        part, detail = part_of(list(stack))
        parts[part] += count
        details[(part, detail)] += count
    return sum(stacks.values()), parts, details


def report(files: list[Path], cpu_ms: float, top: int = 4) -> list[str]:
    """Lines of the breakdown: each part's share of the samples and its share of ``cpu_ms``."""
    total, parts, details = breakdown(files)
    if not total:
        return ["(no samples: is py-spy installed, and may it attach to the workers?)"]
    lines = [f"{total} samples of GIL holders; {cpu_ms:.1f} ms of CPU per no-op shared by part:"]
    for part, count in parts.most_common():
        share = count / total
        inner = ", ".join(
            f"{detail} {n / total:.0%}"
            for (p, detail), n in details.most_common()
            if p == part and n / total >= 0.005
        )
        inner = ", ".join(inner.split(", ")[:top])
        lines.append(f"  {part:<26} {share:6.1%}  {share * cpu_ms:5.1f} ms  ({inner})")
    return lines
