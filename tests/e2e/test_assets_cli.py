"""``tokenwire assets`` as a newcomer meets it: list, build with visible progress, clear errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from server.assets import ASSETS
from server.assets.downloads import DOWNLOADS_ENV, downloads_dir
from tests.support.server_proc import run_cli


def test_list_shows_every_asset_with_state_and_path(asset: Callable[[str], Path]) -> None:
    built = asset("qwen3")
    result = run_cli(["assets", "--list"], env={"TOKENWIRE_CACHE_DIR": str(built.parents[1])})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"cache: {built.parents[1]}"
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == list(ASSETS)
    assert rows["qwen3"].split()[2] == "built" and rows["qwen3"].endswith(str(built))


@pytest.mark.slow
def test_build_into_a_cache_dir_shows_progress(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {DOWNLOADS_ENV: str(downloads_dir()), "TOKENWIRE_CACHE_DIR": None}
    result = run_cli(["assets", "--only", "deepseek-v3.1", "--cache-dir", str(cache)], env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"deepseek-v3.1: {cache / 'assets' / 'deepseek-v3.1'} (")
    assert "tokenwire assets: building deepseek-v3.1" in result.stderr
    assert "tokenwire assets: built deepseek-v3.1" in result.stderr
    listing = run_cli(["assets", "--list", "--cache-dir", str(cache)], env=env).stdout
    states = {line.split()[0]: line.split()[2] for line in listing.splitlines()[1:]}
    assert states["deepseek-v3.1"] == "built" and states["qwen3"] == "missing"
    again = run_cli(["assets", "--only", "deepseek-v3.1", "--cache-dir", str(cache)], env=env)
    assert again.returncode == 0 and "building" not in again.stderr


def test_unknown_asset_exits_2_naming_the_valid_ones() -> None:
    result = run_cli(["assets", "--only", "gpt-5"])
    assert result.returncode == 2
    assert "unknown asset(s) gpt-5; valid names: smollm2-135m-instruct, qwen3" in result.stderr
