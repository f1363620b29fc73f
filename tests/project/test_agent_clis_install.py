"""scripts/install-agent-clis.sh: the pins it installs are the versions the tests name, every package
of the lockfile is pinned by its hash, an unreachable registry is exit 3 with the reason (so the
agent CLI tests skip and scripts/test.sh goes on), and a cached install needs no registry at all."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.agent_clis import CLAUDE_CODE_VERSION, CODEX_VERSION, INSTALL, UNREACHABLE, agent_clis

SPEC = INSTALL.parent / "agent-clis"
NOWHERE = "http://127.0.0.1:9/"  # the discard port: nothing answers


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(INSTALL)], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120)


def test_the_pins_are_the_tested_versions_and_every_package_has_its_hash() -> None:
    package = json.loads((SPEC / "package.json").read_text())
    assert package["dependencies"] == {"@openai/codex": CODEX_VERSION, "@anthropic-ai/claude-code": CLAUDE_CODE_VERSION}
    lock = json.loads((SPEC / "package-lock.json").read_text())
    packages = {k: v for k, v in lock["packages"].items() if k}
    assert packages["node_modules/@openai/codex"]["version"] == CODEX_VERSION
    assert packages["node_modules/@anthropic-ai/claude-code"]["version"] == CLAUDE_CODE_VERSION
    assert "node_modules/@openai/codex-linux-x64" in packages  # the platform binaries are pinned too
    assert all(p["integrity"].startswith("sha512-") for p in packages.values())


def test_an_unreachable_registry_is_exit_3_with_the_reason(tmp_path: Path) -> None:
    done = run({"npm_config_registry": NOWHERE, "TOKENWIRE_AGENT_CLI_DIR": str(tmp_path / "clis")})
    assert done.returncode == UNREACHABLE
    assert done.stdout == ""
    assert f"the npm registry ({NOWHERE}) cannot be reached" in done.stderr
    assert f"@openai/codex@{CODEX_VERSION}" in done.stderr and f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}" in done.stderr
    assert not (tmp_path / "clis").exists()


@pytest.mark.slow  # installs the CLIs from npm the first time
def test_a_cached_install_needs_no_registry() -> None:
    installed = agent_clis()  # skips where npm cannot be reached
    done = run({"npm_config_registry": NOWHERE})
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == installed.bin_dir
    for cli, expected in ((installed.codex, f"codex-cli {CODEX_VERSION}"),
                          (installed.claude, f"{CLAUDE_CODE_VERSION} (Claude Code)")):
        version = subprocess.run([str(cli), "--version"], capture_output=True, text=True, timeout=60,
                                 env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/")})
        assert version.stdout.strip() == expected


def test_no_npm_is_exit_3(tmp_path: Path) -> None:
    """Without npm on PATH (only the tools the script needs besides it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bash", "sha256sum", "cut", "sed", "head", "grep", "dirname", "mktemp", "timeout"):
        found = subprocess.run(["bash", "-c", f"command -v {name}"], capture_output=True, text=True).stdout.strip()
        (bin_dir / name).symlink_to(found)
    done = subprocess.run([str(bin_dir / "bash"), str(INSTALL)], capture_output=True, text=True, timeout=60,
                          env={"PATH": str(bin_dir), "HOME": str(tmp_path),
                               "TOKENWIRE_AGENT_CLI_DIR": str(tmp_path / "clis")})
    assert done.returncode == UNREACHABLE
    assert "no npm on PATH" in done.stderr
