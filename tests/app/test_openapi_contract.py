"""The HTTP contract details the schemathesis suite (tests/e2e/test_http_fuzz.py) found wrong, pinned
in-process: a 405 lists the allowed methods, errors on /v1/messages* use Anthropic's envelope, and
the document states the validators' structural rules and the shapes of streamed events."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings


@pytest.fixture(scope="module")
def client(asset: Callable[[str], Path], tokenizer: Callable[[str], Any]) -> Iterator[TestClient]:
    settings = Settings(mode=Mode.RENDER, model_dir=asset("qwen3"), served_model_name="m", environ={},
                        state_secret=b"test-state-secret-0123456789-abcdefghijklmnopqrstuvwxyz")
    ctx = ServerContext(settings=settings, gating=decide(Mode.RENDER, {}), tokenizer=tokenizer("qwen3"),
                        max_model_len=4096)
    with TestClient(create_app(ctx)) as c:
        yield c


@pytest.fixture(scope="module")
def doc(client: TestClient) -> dict[str, Any]:
    return client.get("/openapi.json").json()  # type: ignore[no-any-return]


def test_a_405_lists_the_allowed_methods(client: TestClient) -> None:
    r = client.request("TRACE", "/v1/chat/completions/render")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error"]["code"] == 405


def test_errors_on_anthropic_paths_use_the_anthropic_envelope(client: TestClient) -> None:
    r = client.get("/v1/messages/render")
    assert r.status_code == 405
    assert r.json() == {"type": "error", "error": {"type": "api_error",
                                                   "message": "Method GET is not allowed on /v1/messages/render"}}
    r = client.post("/v1/messages/nope", json={})
    assert r.status_code == 404 and r.json()["type"] == "error"


def test_request_models_are_components_with_the_validators_structural_rules(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    body = doc["paths"]["/v1/chat/completions/render"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/ChatCompletionRequest"}
    assert schemas["ChatCompletionRequest"]["properties"]["messages"]["minItems"] == 1
    assert schemas["MessagesRequest"]["properties"]["messages"]["minItems"] == 1
    completion = schemas["CompletionRequest"]
    assert "prompt" in completion["required"]
    assert completion["properties"]["prompt_embeds"]["type"] == "null"
    assert schemas["ChatCompletionRequest"]["properties"]["chat_template"]["type"] == "null"


def test_anthropic_operations_declare_the_anthropic_error_and_health_its_503(doc: dict[str, Any]) -> None:
    messages = doc["paths"]["/v1/messages/render"]["post"]["responses"]["default"]
    assert messages["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/AnthropicError"}
    health = doc["paths"]["/health"]["get"]["responses"]
    assert health["503"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/HealthResponse"}
