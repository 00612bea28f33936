"""`kernels.build`: the cached libraries."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from specdecode.kernels import build


def test_a_new_build_removes_the_libraries_no_build_has_used_for_a_month(tmp_path, monkeypatch):
    """Every change of the sources, compiler or flags builds a new library, so the cache grows
    with each upgrade: building one removes those not used (their time is their last use) for
    UNUSED_DAYS; a recent one stays (another checkout may use it), and using one renews it."""
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    month = build.UNUSED_DAYS * 86400

    def aged(name: str, seconds: float) -> Path:
        path = kernels / name
        path.write_bytes(b"")
        os.utime(path, (time.time() - seconds,) * 2)
        return path

    old, recent = aged("avx2-0000000000000000.so", month + 3600), aged("avx2-1111.so", 3600)
    marker = aged("avx2-2222.failed", month + 3600)

    def compile_(command, **kwargs):  # the compiler's part: write the -o file
        with open(command[command.index("-o") + 1], "wb"):
            pass
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(build.subprocess, "run", compile_)
    monkeypatch.setattr(build, "_version", lambda cc: "cc 1")
    library = build.build("generic", "cc")
    assert library.is_file() and recent.is_file()
    assert not old.exists() and not marker.exists()

    os.utime(library, (time.time() - month - 3600,) * 2)  # unused a month, then used again
    assert build.build("generic", "cc") == library
    assert time.time() - library.stat().st_mtime < 60
