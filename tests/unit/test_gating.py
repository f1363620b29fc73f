"""The scale-out gating decision, as a full matrix (mode × environment × flag)."""

from __future__ import annotations

import pytest

from server.gating import DISABLED_HINT, ENV_ALIAS, ENV_VAR, GatingError, RouteGroup, decide
from server.settings import Mode

SCALE_OUT = {RouteGroup.RENDER, RouteGroup.DERENDER}

# (name, environment, --enable-scale-out)
SETTINGS = [
    ("unset", {}, False),
    ("zero", {ENV_VAR: "0"}, False),
    ("one", {ENV_VAR: "1"}, False),
    ("invalid", {ENV_VAR: "yes"}, False),
    ("alias", {ENV_ALIAS: "1"}, False),
    ("alias-zero", {ENV_ALIAS: "0"}, False),
    ("conflicting-alias", {ENV_VAR: "1", ENV_ALIAS: "0"}, False),
    ("agreeing-alias", {ENV_VAR: "1", ENV_ALIAS: "1"}, False),
    ("flag", {}, True),
    ("flag-and-zero", {ENV_VAR: "0"}, True),
]

# Expected outcome per (mode, setting): an error fragment, or (scale-out exposed, info hint logged).
EXPECTED: dict[tuple[Mode, str], str | tuple[bool, bool]] = {}
for _mode in Mode:
    for _name, _env, _flag in SETTINGS:
        if _name == "invalid":
            EXPECTED[_mode, _name] = "is invalid; use 0 or 1"
        elif _name == "conflicting-alias":
            EXPECTED[_mode, _name] = "disagree"
        elif _name == "flag-and-zero":
            EXPECTED[_mode, _name] = "conflicts with --enable-scale-out"
        elif _name in ("zero", "alias-zero"):
            EXPECTED[_mode, _name] = (
                f"conflicts with `{_mode.command}`" if _mode is not Mode.SERVE else (False, True)
            )
        elif _mode is Mode.SERVE:
            EXPECTED[_mode, _name] = (_name != "unset", _name == "unset")
        else:
            EXPECTED[_mode, _name] = (True, False)


@pytest.mark.parametrize("mode", list(Mode), ids=lambda m: m.value)
@pytest.mark.parametrize(("name", "env", "flag"), SETTINGS, ids=[s[0] for s in SETTINGS])
def test_gating_matrix(mode: Mode, name: str, env: dict[str, str], flag: bool) -> None:
    expected = EXPECTED[mode, name]
    if isinstance(expected, str):
        with pytest.raises(GatingError, match=expected.replace("`", ".").replace("-", ".")):
            decide(mode, env, enable_scale_out=flag)
        return
    gating = decide(mode, env, enable_scale_out=flag)
    exposed, hint = expected
    assert (gating.groups >= SCALE_OUT) is exposed
    assert (not (SCALE_OUT & gating.groups)) is (not exposed)
    assert (gating.info == DISABLED_HINT) is hint
    assert (RouteGroup.ABORT in gating) is (mode is Mode.TOKENS_ONLY)
    assert (RouteGroup.GENERATE in gating) is (mode is Mode.TOKENS_ONLY or (mode is Mode.SERVE and exposed))
    assert RouteGroup.ALWAYS in gating


def test_dedicated_mode_conflict_message_is_exact() -> None:
    with pytest.raises(GatingError) as info:
        decide(Mode.RENDER, {ENV_VAR: "0"})
    assert str(info.value) == (
        "`TOKENWIRE_ENABLE_SCALE_OUT_ENDPOINTS=0` conflicts with `tokenwire launch render`; unset it or set it to 1"
    )


def test_render_with_engine_url_serves_pipelines() -> None:
    assert RouteGroup.PIPELINE in decide(Mode.RENDER, {}, has_engine_url=True)
    assert RouteGroup.PIPELINE not in decide(Mode.RENDER, {})


def test_tokens_only_does_not_serve_openai_pipelines() -> None:
    assert RouteGroup.PIPELINE not in decide(Mode.TOKENS_ONLY, {})


def test_whitespace_around_value_is_accepted() -> None:
    assert decide(Mode.SERVE, {ENV_VAR: " 1 "}).scale_out
