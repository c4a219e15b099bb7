"""Runs test_exec_kernels.py in a fresh process under TRITON_INTERPRET=1 (the CPU interpreter)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="already interpreting: run directly")
def test_kernels_under_interpreter():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    target = Path(__file__).with_name("test_exec_kernels.py")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(target)],
                         env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "skipped" not in res.stdout.splitlines()[-1]
