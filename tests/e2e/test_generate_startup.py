"""Starting the local engine on something that is not a causal-LM directory fails with one clear line."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.server_proc import run_cli

pytestmark = pytest.mark.slow


def test_serving_a_tokenizer_only_directory_exits_2_with_a_clear_message(
        asset: Callable[[str], Path], tmp_path: Path) -> None:
    for f in asset("tiny-qwen3").glob("tokenizer*"):
        shutil.copy(f, tmp_path / f.name)
    result = run_cli(["serve", str(tmp_path), "--tokens-only", "--port", "0"])
    assert result.returncode == 2
    assert result.stderr.strip() == (f"tokenwire: error: cannot serve {tmp_path}: no vocab_size in its config.json "
                                     "(is it a Hugging Face causal-LM directory?)")
