"""``--tool-call-parser auto`` / ``--reasoning-parser auto``: on every chat template the tests ship, the
choice is the pair vLLM's recipes name for that model, and every chosen name is registered; a misspelt
name is a usage error before any model loads; the start-up line says what was chosen and why."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from server.assets import ASSETS
from server.cli import main
from server.cli_flags import build_parser
from server.cli_parsers import auto_parsers, model_chat_template
from session.parsers import REASONING_PARSERS, TOOL_PARSERS
from session.parsers.auto import NoParserMatches, choose, resolve

# asset → (tool parser, reasoning parser) as vLLM's recipes for the real model name them
EXPECTED: dict[str, tuple[str | None, str | None]] = {
    "smollm2-135m-instruct": (None, None),
    "qwen3": ("hermes", "qwen3"),
    "tiny-qwen3": ("hermes", "qwen3"),
    "qwen2.5": ("hermes", None),
    "llama3.1": ("llama3_json", None),
    "tiny-llama": ("llama3_json", None),
    "mistral-nemo": ("mistral", None),
    "deepseek-v3.1": ("deepseek_v31", "deepseek_v3"),
    "tiny-qwen2-vl": (None, None),
    "qwen3-coder": ("qwen3_coder", None),
    "qwen3.5": ("qwen3_coder", "qwen3"),
    "step3.5": ("step3p5", "step3p5"),
    "nemotron-3": ("qwen3_coder", "nemotron_v3"),
    "glm-4.6": ("glm45", "glm45"),
    "glm-4.7": ("glm47", "glm45"),
    "kimi-k2": ("kimi_k2", None),
    "kimi-k2-thinking": ("kimi_k2", "kimi_k2"),
    "minimax-m2": ("minimax_m2", "minimax_m2_append_think"),
    "seed-oss": ("seed_oss", "seed_oss"),
    "granite-3.3": ("granite", "granite"),
    "granite-4.0": ("granite4", None),
    "deepseek-v3.2": ("deepseek_v32", "deepseek_v3"),
    "ministral-3-reasoning": ("mistral", "mistral"),
    "gemma-4": ("gemma4", "gemma4"),
    "gpt-oss": ("openai", "openai_gptoss"),
    "tiny-gpt-oss": ("openai", "openai_gptoss"),
}


def _config(directory: Path) -> dict[str, object] | None:
    path = directory / "config.json"
    return json.loads(path.read_text()) if path.is_file() else None


def test_every_shipped_asset_has_an_expectation() -> None:
    assert set(EXPECTED) == set(ASSETS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_auto_picks_vllms_parsers_for_every_shipped_template(name: str, asset: Callable[[str], Path]) -> None:
    directory = asset(name)
    choice = choose(model_chat_template(directory), _config(directory))
    assert (choice.tool, choice.reasoning) == EXPECTED[name], choice.why
    assert choice.tool is None or choice.tool in TOOL_PARSERS
    assert choice.reasoning is None or choice.reasoning in REASONING_PARSERS


def test_model_type_decides_before_the_template() -> None:
    choice = choose("{{ '<tool_call>' }} arguments", {"model_type": "gpt_oss"})
    assert (choice.tool, choice.reasoning) == ("openai", "openai_gptoss")
    assert "model_type" in choice.why


def test_resolve_leaves_named_parsers_alone_and_says_nothing() -> None:
    assert resolve("hermes", None, "<arg_key>", None) == ("hermes", None, None)


def test_resolve_replaces_auto_and_says_why() -> None:
    tool, reasoning, line = resolve("auto", "auto", "<tool_call> arguments <think>", None)
    assert (tool, reasoning) == ("hermes", "qwen3")
    assert line is not None and "--tool-call-parser hermes" in line and "Hermes <tool_call> JSON" in line


def test_auto_tool_parser_without_a_match_is_a_clear_error() -> None:
    with pytest.raises(NoParserMatches, match="--tool-call-parser auto: the chat template has no tool-call"):
        resolve("auto", None, "{{ messages }}", None)


def test_auto_reasoning_parser_without_a_match_is_none() -> None:
    assert resolve(None, "auto", "{{ messages }}", None)[:2] == (None, None)


def test_a_misspelt_parser_name_is_a_usage_error_naming_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["launch", "render", "/nonexistent", "--tool-call-parser", "hermess"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown tool call parser 'hermess'; valid names: auto, " in err and "qwen3_coder" in err
    with pytest.raises(SystemExit):
        main(["launch", "render", "/nonexistent", "--reasoning-parser", "qwen33"])
    assert "unknown reasoning parser 'qwen33'" in capsys.readouterr().err


def test_help_lists_every_parser_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["launch", "render", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in [*TOOL_PARSERS, *REASONING_PARSERS]:
        assert name in text, name


def test_the_cli_resolves_auto_from_the_model_directory(asset: Callable[[str], Path],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    args = build_parser().parse_args(["launch", "render", "x", "--tool-call-parser", "auto",
                                      "--reasoning-parser", "auto"])
    with caplog.at_level(logging.INFO, logger="tokenwire"):
        assert auto_parsers(args, asset("glm-4.7"), None) == ("glm47", "glm45")
    assert "parsers chosen automatically: --tool-call-parser glm47, --reasoning-parser glm45" in caplog.text
