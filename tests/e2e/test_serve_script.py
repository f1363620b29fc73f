"""``scripts/serve.sh`` restarts in seconds: ``scripts/install.sh`` skips pip while pyproject.toml
and the scripts are unchanged since its last successful install (a stamp in ``.venv``).

The stamp logic runs on a copy of the scripts with a stand-in ``.venv`` whose ``python`` and
``tokenwire`` only record how they were called; the last test starts the real script."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow  # runs the install scripts: the full suite only, not the fast loop

ROOT = Path(__file__).resolve().parents[2]
# The extras scripts/install.sh installs: `extras="..."`, then the dev line's `extras="..."`.
PLAIN_EXTRAS, DEV_EXTRAS = re.findall(r'extras="([^"]+)"', (ROOT / "scripts/install.sh").read_text())
PIP_INSTALL = "python -m pip --disable-pip-version-check -q install -e .[{}]"
# Records every call; `python -c CODE` answers 0, as when torch and xgrammar are installed already.
FAKE = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$CALLS"
case " $* " in *" install "*) [ -n "${FAIL_PIP:-}" ] && exit 1 ;; esac
exit 0
"""


class Checkout:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls = root / "calls.log"
        (root / "scripts").mkdir()
        for name in ("pyproject.toml", "scripts/install.sh", "scripts/serve.sh"):
            shutil.copy(ROOT / name, root / name)
        bin_dir = root / ".venv" / "bin"
        bin_dir.mkdir(parents=True)
        for name in ("python", "tokenwire"):
            (bin_dir / name).write_text(FAKE)
            (bin_dir / name).chmod(0o755)

    def run(self, script: str, *args: str, **env: str) -> list[str]:
        """Runs ``scripts/<script>``; returns the calls it made to .venv/bin/python and tokenwire."""
        self.calls.write_text("")
        done = subprocess.run(["bash", f"scripts/{script}", *args], cwd=self.root, capture_output=True, text=True,
                              timeout=60, env={**os.environ, "CALLS": str(self.calls), **env})
        calls = self.calls.read_text().splitlines()
        if env.get("FAIL_PIP"):
            assert done.returncode != 0
        else:
            assert done.returncode == 0, done.stderr
        return calls

    @property
    def stamp(self) -> Path:
        return self.root / ".venv" / ".tokenwire-install"


def installs(calls: list[str]) -> list[str]:
    return [c for c in calls if " install " in c]


@pytest.fixture
def checkout(tmp_path: Path) -> Checkout:
    return Checkout(tmp_path)


def test_a_second_serve_skips_the_install_and_serves_at_once(checkout: Checkout) -> None:
    first = checkout.run("serve.sh", "--port", "9000")
    assert installs(first) == [PIP_INSTALL.format(PLAIN_EXTRAS)]
    assert "examples" in PLAIN_EXTRAS.split(",")  # the SDKs the README's examples use
    assert first[-1] == "tokenwire serve --port 9000"
    assert checkout.stamp.read_text().split()[1] == PLAIN_EXTRAS
    second = checkout.run("serve.sh", "--port", "9000")
    assert second == ["tokenwire serve --port 9000"]  # no pip, no python at all


@pytest.mark.parametrize("changed", ["pyproject.toml", "scripts/install.sh", "scripts/serve.sh"])
def test_a_change_to_pyproject_or_the_scripts_installs_again(checkout: Checkout, changed: str) -> None:
    checkout.run("serve.sh")
    with (checkout.root / changed).open("a") as f:
        f.write("\n# changed\n")
    assert len(installs(checkout.run("serve.sh"))) == 1
    assert installs(checkout.run("serve.sh")) == []


def test_dev_covers_a_plain_install_but_not_the_reverse(checkout: Checkout) -> None:
    checkout.run("install.sh")
    assert installs(checkout.run("install.sh", "dev")) == [PIP_INSTALL.format(DEV_EXTRAS)]
    assert checkout.run("install.sh") == []
    assert checkout.run("install.sh", "dev") == []


def test_a_failed_install_leaves_no_stamp_and_the_next_run_tries_again(checkout: Checkout) -> None:
    checkout.run("install.sh")
    (checkout.root / "pyproject.toml").write_text((checkout.root / "pyproject.toml").read_text() + "\n")
    assert len(installs(checkout.run("install.sh", FAIL_PIP="1"))) == 1
    assert not checkout.stamp.exists()
    assert len(installs(checkout.run("install.sh"))) == 1


def test_tokenwire_reinstall_forces_the_install(checkout: Checkout) -> None:
    checkout.run("install.sh")
    assert len(installs(checkout.run("install.sh", TOKENWIRE_REINSTALL="1"))) == 1


@pytest.mark.slow
def test_the_real_serve_script_serves_without_reinstalling(asset: Callable[[str], Path]) -> None:
    model = asset("tiny-qwen3")
    subprocess.run(["bash", "scripts/install.sh"], cwd=ROOT, check=True, timeout=900)  # a current stamp
    proc = subprocess.Popen(["bash", "scripts/serve.sh", str(model), "--port", "0", "--dtype", "float32"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # ends if the process exits
            lines.append(line)
            if m := re.search(r"tokenwire: listening on (http://\S+)", line):
                break
        else:
            raise AssertionError("serve.sh exited before listening:\n" + "".join(lines))
        url = m.group(1)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "serve.sh never became healthy:\n" + "".join(lines)
            time.sleep(0.1)
        assert not any("installing" in line for line in lines), "".join(lines)
    finally:
        proc.terminate()
        proc.wait(30)
