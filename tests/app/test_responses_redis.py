"""Stored responses shared by two front ends through a real ``redis-server`` (Debian's package,
scripts/install-redis.sh), each front end configured with ``--responses-store redis://…``:
a response made on one is retrieved, chained with ``previous_response_id`` and deleted on the other;
records expire; a store that does not answer is a 503 for what needs it and never costs the answer."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.cli_flags import build_parser
from server.cli_settings import settings_from_args
from server.context import ServerContext, create_engine
from server.gating import decide
from server.responses_store import RedisStore, StoreUnavailable
from server.settings import Mode, Settings
from tests.conftest import asset_path, tokenizer_of
from tests.support.scripted_engine import ScriptedEngine
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="no redis-server on PATH (scripts/install-redis.sh installs Debian's)")
SECRET = b"test-state-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
SCRIPT = "<think>\nShort.\n</think>\n\nHello there.<|im_end|>"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    work: Path = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(work)], stdout=subprocess.DEVNULL)
    try:
        def up() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    return s.recv(16).startswith(b"+PONG")
            except OSError:
                return False
        wait_until(up, "redis-server to answer", timeout=30, interval=0.05)
        yield f"redis://127.0.0.1:{port}/3"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def engine() -> Iterator[ScriptedEngine]:
    ids = tokenizer_of("qwen3").encode(SCRIPT, add_special_tokens=False)
    with ScriptedEngine(ids) as scripted:
        yield scripted


def front(engine: ScriptedEngine, store: str) -> TestClient:
    settings = Settings(mode=Mode.RENDER, model_dir=asset_path("qwen3"), served_model_name="qwen3",
                        environ={}, responses_store=store, engine_url=engine.url,
                        reasoning_parser="qwen3", state_secret=SECRET)
    ctx = ServerContext(settings=settings, gating=decide(Mode.RENDER, {}, has_engine_url=True),
                        tokenizer=tokenizer_of("qwen3"), max_model_len=4096, engine=create_engine(settings, 4096))
    return TestClient(create_app(ctx))


@pytest.fixture(scope="module")
def fronts(engine: ScriptedEngine, redis_url: str) -> Iterator[tuple[TestClient, TestClient]]:
    with front(engine, redis_url) as a, front(engine, redis_url) as b:
        yield a, b


def test_a_response_made_on_one_front_end_is_served_by_the_other(fronts: tuple[TestClient, TestClient],
                                                                engine: ScriptedEngine) -> None:
    a, b = fronts
    first = a.post("/v1/responses", json={"input": "Hi", "stream": True})
    done = [line for line in first.text.split("\n") if line.startswith("data: ")][-1]
    rid = json.loads(done[6:])["response"]["id"]
    got = b.get(f"/v1/responses/{rid}")
    assert got.status_code == 200 and got.json()["status"] == "completed"
    assert got.json()["output"][-1]["content"][0]["text"] == "\n\nHello there."
    assert b.get(f"/v1/responses/{rid}/input_items").json()["data"][0]["content"][0]["text"] == "Hi"
    follow = b.post("/v1/responses", json={"input": "And you?", "previous_response_id": rid})
    assert follow.status_code == 200, follow.text
    prompt = tokenizer_of("qwen3").decode(engine.requests[-1]["token_ids"])
    assert prompt.index("Hi") < prompt.index("Hello there.") < prompt.index("And you?")
    assert b.delete(f"/v1/responses/{rid}").json()["deleted"] is True
    assert a.get(f"/v1/responses/{rid}").status_code == 404
    gone = a.post("/v1/responses", json={"input": "x", "previous_response_id": rid})
    assert gone.status_code == 400 and gone.json()["error"]["code"] == "previous_response_not_found"


def test_records_expire(redis_url: str) -> None:
    async def main() -> None:
        store = RedisStore(redis_url, max_age_s=0.05)
        keep = RedisStore(redis_url)  # the default age: still there after the other one expired
        record = {"response": {"id": "r"}, "input": [], "history": []}
        await store.put("resp_expiring", record)
        await keep.put("resp_kept", record)
        for _ in range(200):
            if await store.get("resp_expiring") is None:
                break
            await anyio.sleep(0.05)
        assert await store.get("resp_expiring") is None
        assert await keep.get("resp_kept") == record
        await store.close()
        await keep.close()
    anyio.run(main)


def test_a_store_that_does_not_answer_is_a_503_and_never_costs_the_answer(engine: ScriptedEngine) -> None:
    with front(engine, f"redis://127.0.0.1:{free_port()}/0") as lonely:
        r = lonely.post("/v1/responses", json={"input": "Hi"})  # store: true, but nowhere to keep it
        assert r.status_code == 200 and r.json()["status"] == "completed"
        chained = lonely.post("/v1/responses", json={"input": "x", "previous_response_id": r.json()["id"]})
        assert chained.status_code == 503 and "did not answer" in chained.json()["error"]["message"]
        assert lonely.get(f"/v1/responses/{r.json()['id']}").status_code == 503


def test_a_bad_store_url_is_refused() -> None:
    with pytest.raises(ValueError, match="redis://"):
        RedisStore("http://127.0.0.1:6379")
    with pytest.raises(ValueError, match="number"):
        RedisStore("redis://127.0.0.1:6379/zero")


def test_an_unreachable_store_raises_store_unavailable() -> None:
    async def main() -> None:
        store = RedisStore(f"redis://127.0.0.1:{free_port()}", timeout=2)
        with pytest.raises(StoreUnavailable) as info:
            await store.get("resp_x")
        assert info.value.status == 503
    anyio.run(main)


def test_the_flag_and_the_variable_set_the_store_and_a_bad_url_is_a_configuration_error(tmp_path: Path) -> None:
    parser = build_parser()
    for command in (["serve", str(tmp_path)], ["launch", "render", str(tmp_path)]):
        assert settings_from_args(parser.parse_args(command), {}).responses_store is None
        flag = settings_from_args(parser.parse_args([*command, "--responses-store", "redis://db:6380/2"]), {})
        assert flag.responses_store == "redis://db:6380/2"
        env = settings_from_args(parser.parse_args(command), {"TOKENWIRE_RESPONSES_STORE": "redis://db/1"})
        assert env.responses_store == "redis://db/1"
        with pytest.raises(ValueError, match="redis://"):
            settings_from_args(parser.parse_args([*command, "--responses-store", "db:6379"]), {})
