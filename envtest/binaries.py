"""Where the pinned Kubernetes binaries are: asks ``envtest/build/build.sh --check``.

The build script alone knows the versions (from ``envtest/build/go.mod``) and the cache layout, so
this module never guesses a path: it runs the script, which answers at once without building.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

BUILD_SCRIPT = Path(__file__).resolve().parent / "build" / "build.sh"


class BinariesMissing(RuntimeError):
    """The binaries are not built (``make kube`` builds them) or the build script failed."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path

    @classmethod
    def locate(cls) -> Binaries:
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "--check"], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise BinariesMissing(result.stderr.strip() or f"{BUILD_SCRIPT} --check failed")
        paths = dict(line.split("=", 1) for line in result.stdout.split() if "=" in line)
        return cls(
            etcd=Path(paths["etcd"]),
            kube_apiserver=Path(paths["kube-apiserver"]),
            kube_controller_manager=Path(paths["kube-controller-manager"]),
        )
