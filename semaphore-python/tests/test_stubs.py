"""The type stubs (__init__.pyi) agree with the module, and type-check its use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is not installed (scripts/test-python installs it)")


def mypy(cache: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          cwd=Path(__file__).parent, env={**os.environ, "MYPY_CACHE_DIR": str(cache)})


def test_the_stubs_match_the_module(tmp_path):
    config = tmp_path / "mypy.ini"  # stubtest reads its cache directory only from here
    config.write_text(f"[mypy]\ncache_dir = {tmp_path / 'cache'}\n")
    done = mypy(tmp_path, "mypy.stubtest", "--mypy-config-file", str(config), "semaphore_pool")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_documented_use_type_checks_strictly(tmp_path):
    done = mypy(tmp_path, "mypy", "--strict", "typing_sample.py")
    assert done.returncode == 0, done.stdout + done.stderr
