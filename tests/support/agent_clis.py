"""The agent CLIs the end-to-end tests drive (Claude Code, Codex CLI), pinned and installed from npm by
``scripts/install-agent-clis.sh`` into tokenwire's user cache, and run with everything that would
reach beyond the test's own server switched off.

:func:`agent_clis` runs the install script (instant once cached) and gives the folder holding both
commands; it skips the test only where the script says npm or its registry cannot be reached (exit 3)
and fails on anything else. What each CLI reaches for by itself, and the switch that stops it, is
noted at the constants below (found with ``strace -f -e connect`` of whole runs)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "scripts" / "install-agent-clis.sh"
CODEX_VERSION = "0.171.0"
CLAUDE_CODE_VERSION = "2.1.332"
UNREACHABLE = 3  # the install script's exit status where npm or its registry cannot be reached

# Claude Code: no telemetry, error reports, auto-update, feedback survey or other "nonessential"
# traffic (CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC covers them all; the others are its parts, set too
# so that a later release that splits them stays quiet), and an API key so it never asks to log in.
CLAUDE_CODE_QUIET = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "NO_COLOR": "1",
}

# Codex CLI: the config.toml lines that keep it off the network (besides the provider itself): no
# update check, no analytics or feedback upload, and no plugin features (with them on, every start
# looks up chatgpt.com and api.github.com to sync the curated plugin marketplace).
CODEX_QUIET_TOML = """\
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false
remote_plugin = false
plugin_sharing = false
apps = false
"""


@dataclass(frozen=True)
class AgentCLIs:
    bin_dir: Path

    @property
    def codex(self) -> Path:
        return self.bin_dir / "codex"

    @property
    def claude(self) -> Path:
        return self.bin_dir / "claude"


@functools.cache
def _install() -> tuple[int, str, str]:
    done = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=900)
    return done.returncode, done.stdout, done.stderr


def agent_clis() -> AgentCLIs:
    """The installed CLIs; skips where npm cannot be reached, fails on any other install failure."""
    rc, out, err = _install()
    if rc == UNREACHABLE:
        pytest.skip(f"agent CLIs not installed: {err.strip()}")
    assert rc == 0, f"scripts/install-agent-clis.sh exited {rc}:\n{err}"
    found = AgentCLIs(Path(out.strip().splitlines()[-1]))
    assert os.access(found.codex, os.X_OK) and os.access(found.claude, os.X_OK), found
    return found


def isolated_env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    """A minimal environment for a CLI under test: only PATH and locale from ours (no proxy, no real
    API keys, no user config), ``HOME`` in the test's own folder, plus ``extra``."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR")}
    return {**keep, "HOME": str(home), **extra}


def codex_model_catalog(slug: str, context_window: int) -> dict[str, object]:
    """A ``model_catalog_json`` document with one entry for ``slug``: without one Codex 0.171.0 reports
    an ``error`` item "Model metadata for `…` not found" on every turn. The fields are those Codex
    requires of an entry; ``base_instructions`` is the text Codex uses for a model it has no metadata
    for (the first developer message of tests/data/codex/http.json), so the prompt is the one a user
    without a catalog gets."""
    recorded = json.loads((ROOT / "tests" / "data" / "codex" / "http.json").read_text())
    fallback = recorded["turns"][0]["exchanges"][0]["body"]["input"][0]["content"][0]["text"]
    entry = {
        "slug": slug, "display_name": slug, "description": "served by tokenwire", "context_window": context_window,
        "supported_reasoning_levels": [], "shell_type": "unified_exec", "visibility": "list",
        "supported_in_api": True, "priority": 1, "support_verbosity": False,
        "truncation_policy": {"mode": "tokens", "limit": 10000}, "experimental_supported_tools": [],
        "base_instructions": fallback,
    }
    return {"models": [entry]}
