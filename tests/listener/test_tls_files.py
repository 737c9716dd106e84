"""The listener's TLS files on disk: private, and never broken by two writers at once (two
``serve listener`` on one state directory, or a worker refreshing while another starts)."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from listener.tls import write_material
from pki import services

pytestmark = pytest.mark.django_db(transaction=True)


def test_files_are_private(tmp_path: Path) -> None:
    paths = write_material(tmp_path / "listener-tls")
    for path in paths.values():
        assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "listener-tls").stat().st_mode) == 0o700


def test_concurrent_writers_all_succeed_and_leave_whole_files(tmp_path: Path) -> None:
    directory = tmp_path / "listener-tls"
    cert, key, bundle = services.listener_material()  # issue the material once, outside the race
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer() -> None:
        start.wait()
        try:
            for _ in range(40):
                write_material(directory)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert (directory / "tls.crt").read_bytes() == cert
    assert (directory / "tls.key").read_bytes() == key
    assert (directory / "ca.crt").read_bytes() == bundle
    assert sorted(p.name for p in directory.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
