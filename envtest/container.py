"""The container runtime of the node stand-in: ``python -m envtest.container SPEC.json``.

What runc does for a container, as far as these tests need it, in a process of its own that the
node starts inside the pod's network namespace (``ip netns exec``) and a new mount namespace
(``unshare --mount``); every mount below dies with that namespace, so nothing is left on the
machine:

- **the root file system**: an overlay whose lower layer is this machine's ``/`` and whose upper
  layer is a tmpfs of the container's own, so the container may create and write anywhere (its
  writes vanish with it) and nothing it does reaches the machine; ``/proc``, ``/dev`` and ``/sys``
  are the machine's;
- **the image**: its application directory at ``/app`` and its virtualenv at ``/opt/venv``
  (``envtest.images``), the paths the Dockerfile gives them;
- **the volumes**: each of the pod's volume directories (Secret, ConfigMap, emptyDir and projected
  files, written by the node) bound at its ``mountPath``, read-only where the pod says so;
- ``/etc/hosts``: the pod's, with the cluster's Services (the node's DNS stand-in);
- **the host name**: the pod's name, in a UTS namespace of the pod's container (``unshare --uts``);

then ``chroot`` into that root, ``chdir`` to the working directory and ``exec`` the container's
command with exactly the environment the kubelet computed. The spec is JSON:
``{"root": DIR, "mounts": [{"source", "target", "readOnly"}], "workdir", "argv", "env"}``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"envtest.container: mount {' '.join(args)}: {done.stderr.strip()}")


def _prepare(spec: dict) -> Path:
    layer = Path(spec["root"])
    layer.mkdir(parents=True, exist_ok=True)
    _mount("--make-rprivate", "/")
    _mount("-t", "tmpfs", "-o", "mode=0755", "container-layer", str(layer))
    upper, work, root = layer / "upper", layer / "work", layer / "root"
    for directory in (upper, work, root):
        directory.mkdir()
    _mount("-t", "overlay", "container-root", "-o", f"lowerdir=/,upperdir={upper},workdir={work}", str(root))
    _mount("--rbind", "/dev", str(root / "dev"))
    _mount("-t", "proc", "proc", str(root / "proc"))
    _mount("--rbind", "/sys", str(root / "sys"))
    # The machine's /run is a mount of its own: the overlay shows the empty directory under it,
    # as a container's /run starts empty.
    for mount in spec["mounts"]:
        source, target = Path(mount["source"]), _inside(root, mount["target"])
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                else:
                    target.unlink()
            target.touch()
        _mount("--bind", str(source), str(target))
        if mount.get("readOnly"):
            _mount("-o", "remount,bind,ro", str(target))
    return root


def _inside(root: Path, path: str) -> Path:
    """``path`` as the container sees it, resolved inside ``root``: a symbolic link on the way
    (``/var/run`` -> ``/run``) leads to ``root/run``, never to this machine's ``/run``."""
    resolved, parts, hops = root, [p for p in path.split("/") if p], 0
    while parts:
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            resolved = resolved.parent if resolved != root else root
            continue
        candidate = resolved / part
        if candidate.is_symlink():
            hops += 1
            if hops > 40:
                raise SystemExit(f"envtest.container: too many symbolic links in {path}")
            link = os.readlink(candidate)
            parts = [p for p in link.split("/") if p] + parts
            if link.startswith("/"):
                resolved = root
            continue
        resolved = candidate
    return resolved


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    if spec.get("hostname"):
        socket.sethostname(spec["hostname"])  # the pod's own UTS namespace (unshare --uts)
    root = _prepare(spec)
    os.chroot(root)
    os.chdir(spec.get("workdir") or "/")
    env = {str(k): str(v) for k, v in spec["env"].items()}
    argv = [str(a) for a in spec["argv"]]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        # What a kubelet reports as StartError: the command cannot be run in this image.
        sys.stderr.write(f"envtest.container: cannot run {argv[0]!r}: {exc.strerror}\n")
        raise SystemExit(128) from None


if __name__ == "__main__":
    main()
