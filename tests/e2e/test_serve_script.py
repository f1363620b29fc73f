"""``scripts/serve.sh`` restarts in seconds: ``scripts/install.sh`` skips pip while pyproject.toml
and the scripts are unchanged since its last successful install (a stamp in ``.venv``).

The stamp logic runs on a copy of the scripts with a stand-in ``.venv`` whose ``python`` and
``tokenwire`` only record how they were called; the last test starts the real script."""

from __future__ import annotations

import os
import pty
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


def _on_a_terminal(checkout: Checkout, script: str) -> tuple[list[str], str]:
    """Runs ``scripts/<script>`` with stdout and stderr on a pseudo-terminal, as serve.sh is run by
    hand; returns its calls and what it printed."""
    checkout.calls.write_text("")
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(["bash", f"scripts/{script}"], cwd=checkout.root, stdin=subprocess.DEVNULL,
                              stdout=follower, stderr=follower, timeout=60,
                              env={**os.environ, "CALLS": str(checkout.calls)})
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: all was read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
    assert done.returncode == 0
    return checkout.calls.read_text().splitlines(), b"".join(chunks).decode().replace("\r\n", "\n")


def test_on_a_terminal_the_install_shows_pips_progress(checkout: Checkout) -> None:
    # The first serve.sh ran pip -q: minutes of torch and dependency downloads without a line.
    calls, shown = _on_a_terminal(checkout, "serve.sh")
    assert installs(calls) == [PIP_INSTALL.replace(" -q", "").format(PLAIN_EXTRAS)]  # pip's own progress
    assert f"installing tokenwire[{PLAIN_EXTRAS}]" in shown
    assert re.search(rf"installed tokenwire\[{PLAIN_EXTRAS}\] \(\d+ s\)", shown), shown


def test_in_a_log_pip_stays_quiet_and_each_step_is_a_line_with_its_time(checkout: Checkout) -> None:
    checkout.calls.write_text("")
    done = subprocess.run(["bash", "scripts/install.sh", "dev"], cwd=checkout.root, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "CALLS": str(checkout.calls)})
    assert done.returncode == 0, done.stderr
    assert installs(checkout.calls.read_text().splitlines()) == [PIP_INSTALL.format(DEV_EXTRAS)]
    lines = done.stderr.splitlines()
    assert lines[:2] == ["updating the dependencies in .venv…", f"installing tokenwire[{DEV_EXTRAS}]…"], lines
    assert len(lines) == 3 and re.fullmatch(rf"installed tokenwire\[{DEV_EXTRAS}\] \(\d+ s\)", lines[2]), lines
    checkout.stamp.unlink()
    forced = checkout.run("install.sh", "dev", TOKENWIRE_INSTALL_PROGRESS="1")
    assert installs(forced) == [PIP_INSTALL.replace(" -q", "").format(DEV_EXTRAS)]


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
