"""The scale-out gating decision, as a full matrix (mode × environment × flag)."""

from __future__ import annotations

import pytest

from server.gating import DISABLED_HINT, ENV_VAR, GatingError, RouteGroup, decide
from server.settings import Mode
from tests.support.gating_matrix import SETTINGS, expected

SCALE_OUT = {RouteGroup.RENDER, RouteGroup.DERENDER}


@pytest.mark.parametrize("mode", list(Mode), ids=lambda m: m.value)
@pytest.mark.parametrize(("name", "env", "flag"), SETTINGS, ids=[s[0] for s in SETTINGS])
def test_gating_matrix(mode: Mode, name: str, env: dict[str, str], flag: bool) -> None:
    outcome = expected(mode, name)
    if isinstance(outcome, str):
        with pytest.raises(GatingError, match=outcome.replace("`", ".").replace("-", ".")):
            decide(mode, env, enable_scale_out=flag)
        return
    gating = decide(mode, env, enable_scale_out=flag)
    exposed, hint = outcome
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
