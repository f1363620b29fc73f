"""OpenMP's wait policy (engine/local/omp.py): `tokenwire serve` makes torch's OpenMP threads sleep
at barriers instead of spinning, unless the user chose; libgomp must see it when torch loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.local.omp import prefer_passive_wait, wait_policy

ROOT = Path(__file__).resolve().parents[3]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    return {**env, **extra}


def test_passive_unless_the_user_chose() -> None:
    env: dict[str, str] = {}
    assert wait_policy(env) == "libgomp default (spin, then sleep)"
    assert prefer_passive_wait(env, torch_loaded=True) is False and env == {}  # too late: libgomp has read it
    assert prefer_passive_wait(env, torch_loaded=False) is True
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"} and wait_policy(env) == "PASSIVE"
    chosen = {"OMP_WAIT_POLICY": "active"}
    assert prefer_passive_wait(chosen, torch_loaded=False) is False and chosen == {"OMP_WAIT_POLICY": "active"}
    assert wait_policy(chosen) == "ACTIVE"
    spin = {"GOMP_SPINCOUNT": "300000"}
    assert prefer_passive_wait(spin, torch_loaded=False) is False and "OMP_WAIT_POLICY" not in spin
    assert wait_policy(spin) == "libgomp default, GOMP_SPINCOUNT=300000"


@pytest.mark.slow  # a fresh interpreter that imports torch
def test_libgomp_reads_the_policy_set_before_torch_loads() -> None:
    """OMP_DISPLAY_ENV makes libgomp print the settings it started with."""
    code = ("from engine.local.omp import prefer_passive_wait\n"
            "assert prefer_passive_wait()\n"
            "import torch\n"
            "torch.ones(8).sum()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=_env(OMP_DISPLAY_ENV="TRUE"))
    assert proc.returncode == 0, proc.stderr
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in proc.stderr


@pytest.mark.slow  # a fresh interpreter that imports torch
def test_serve_sets_it_before_anything_loads_torch_unless_the_user_chose() -> None:
    code = ("import os, sys\n"
            "import server.runner\n"
            "def fake(*args, **kwargs):\n"
            "    loaded = sys.modules.get('torch') is not None\n"
            "    print('policy', os.environ.get('OMP_WAIT_POLICY'), 'torch', loaded)\n"
            "    return 0\n"
            "server.runner.run = fake\n"
            "import server.cli\n"
            "sys.exit(server.cli.main(sys.argv[1:]))\n")
    serve = subprocess.run([sys.executable, "-c", code, "serve", "--port", "0"], capture_output=True, text=True,
                           cwd=ROOT, timeout=120, env=_env())
    assert serve.returncode == 0, serve.stderr
    assert "policy PASSIVE torch False" in serve.stdout
    mine = subprocess.run([sys.executable, "-c", code, "serve", "--port", "0"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env=_env(OMP_WAIT_POLICY="ACTIVE"))
    assert "policy ACTIVE torch False" in mine.stdout, mine.stderr
