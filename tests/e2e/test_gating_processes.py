"""The gating matrix against real ``tokenwire`` processes on free ports: startup errors exit 2 with
one line; otherwise the scale-out routes exist exactly where the gating says."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from server.gating import DISABLED_HINT, ENV_ALIAS, ENV_VAR
from server.settings import Mode
from tests.support.gating_matrix import SETTINGS, expected
from tests.support.server_proc import ServerProcess, run_cli

pytestmark = pytest.mark.slow

ARGS = {
    Mode.RENDER: ["launch", "render"],
    Mode.TOKENS_ONLY: ["serve", "--tokens-only"],
    Mode.SERVE: ["serve"],
}
PROBES = {
    "render": "/v1/chat/completions/render",
    "derender": "/v1/chat/completions/derender",
    "generate": "/inference/v1/generate",
    "abort": "/abort_requests",
}


def _cmd(mode: Mode, model: Path, flag: bool) -> list[str]:
    args = [*ARGS[mode], str(model)]
    return [*args, "--enable-scale-out"] if flag else args


def _exists(url: str, path: str) -> bool:
    # An existing route answers a bad body with 4xx other than 404 (or 200 for abort).
    r = httpx.post(url + path, json={}, timeout=30)
    assert r.status_code < 500, (path, r.status_code, r.text)
    return r.status_code != 404


# Every startup error runs in a process (they exit before loading a model, so they are cheap). Of
# the settings that start a server, a process runs one per way the environment reaches the routes
# (unset, the variable, its alias, the flag; 0 in plain serve) where the outcome differs by mode;
# the settings that only repeat one of these (agreeing alias, the alias in a dedicated mode) are
# decided by the same `server.gating` function, which tests/server/test_gating.py checks on the
# whole matrix. Each server start costs ~10 s of CI time.
SERVED = {
    Mode.SERVE: {"unset", "zero", "one", "alias", "alias-zero", "flag"},
    Mode.RENDER: {"unset", "one"},
    Mode.TOKENS_ONLY: {"unset", "flag"},
}
CASES = [(mode, *setting) for mode in Mode for setting in SETTINGS
         if isinstance(expected(mode, setting[0]), str) or setting[0] in SERVED[mode]]


@pytest.mark.parametrize(("mode", "name", "env", "flag"), CASES,
                         ids=[f"{name}-{mode.value}" for mode, name, _, _ in CASES])
def test_gating_in_a_real_process(mode: Mode, name: str, env: dict[str, str], flag: bool,
                                  asset: Callable[[str], Path]) -> None:
    model = asset("tiny-qwen3")
    child_env: dict[str, str | None] = {ENV_VAR: None, ENV_ALIAS: None, **env}
    outcome = expected(mode, name)
    if isinstance(outcome, str):
        done = run_cli(_cmd(mode, model, flag), env=child_env)
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tokenwire: error: "), done.stderr
        assert outcome in lines[0]
        assert "Traceback" not in done.stderr
        return
    exposed, hint = outcome
    with ServerProcess(_cmd(mode, model, flag), env=child_env) as srv:
        assert httpx.get(srv.url + "/health", timeout=10).status_code == 200
        models = httpx.get(srv.url + "/v1/models", timeout=10).json()
        assert models["data"][0]["id"] == model.name
        assert _exists(srv.url, PROBES["render"]) is exposed
        assert _exists(srv.url, PROBES["derender"]) is exposed
        assert _exists(srv.url, PROBES["generate"]) is (mode is Mode.TOKENS_ONLY or (mode is Mode.SERVE and exposed))
        assert _exists(srv.url, PROBES["abort"]) is (mode is Mode.TOKENS_ONLY)
        spec_paths = set(httpx.get(srv.url + "/openapi.json", timeout=10).json()["paths"])
        assert (PROBES["render"] in spec_paths) is exposed
        assert (DISABLED_HINT in srv.output()) is hint

