"""The HTTP contract details the schemathesis suite (tests/e2e/test_http_fuzz.py) found wrong, pinned
in-process: a 405 lists the allowed methods, errors on /v1/messages* use Anthropic's envelope, and
the document states the validators' structural rules and the shapes of streamed events; each
operation's query parameters are the ones its route reads (recorded as the app answers, and found in
the route modules' source), with the types the route accepts, and only routes that can stream
declare text/event-stream."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.datastructures import QueryParams
from starlette.requests import HTTPConnection
from starlette.testclient import TestClient

from server.app import all_routes, create_app
from server.context import ServerContext
from server.gating import decide
from server.settings import Mode, Settings
from tests.support.responses_front import ids_of, render_context
from tests.support.scripted_engine import ScriptedEngine

ROUTES_DIR = Path(__file__).parents[2] / "server" / "routes"


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


@pytest.fixture(scope="module")
def front() -> Iterator[TestClient]:
    """``launch render --engine-url``: the render routes and the pipelines (the Responses API too)."""
    with ScriptedEngine(ids_of("Hi.<|im_end|>")) as engine, TestClient(create_app(render_context(engine))) as c:
        yield c


class _Recorded(QueryParams):
    """A request's query parameters that note each name the route asks for."""

    asked: list[str] = []

    def get(self, key: Any, default: Any = None) -> Any:
        self.asked.append(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> str:
        self.asked.append(key)
        return super().__getitem__(key)

    def __contains__(self, key: Any) -> bool:
        self.asked.append(key)
        return super().__contains__(key)

    def getlist(self, key: Any) -> list[str]:
        self.asked.append(key)
        return super().getlist(key)


def _operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield path.replace("{response_id}", "resp_none"), method.upper(), op


def _query(op: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p["schema"] for p in op.get("parameters", ()) if p["in"] == "query"}


def test_each_operation_declares_the_query_parameters_its_route_reads(front: TestClient,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    doc = front.get("/openapi.json").json()
    monkeypatch.setattr(HTTPConnection, "query_params", property(lambda c: _Recorded(c.scope["query_string"])))
    seen = {}
    for path, method, op in _operations(doc):
        _Recorded.asked = []
        front.request(method, path, json={} if method == "POST" else None)
        seen[f"{method} {path}"] = (sorted(set(_Recorded.asked)), sorted(_query(op)))
    assert {k: read for k, (read, _) in seen.items()} == {k: declared for k, (_, declared) in seen.items()}
    assert seen["GET /v1/responses/resp_none"][0] == ["starting_after", "stream"]  # the recorder records


def test_the_query_parameters_read_in_the_route_modules_are_the_ones_declared() -> None:
    """The names the route modules pass to a query's ``get`` (``request.query_params``, or a name bound
    to it), whatever mode enables their routes: each is declared by a route, and each declared one is read."""
    read = set()
    for source in ROUTES_DIR.glob("*.py"):
        module = importlib.import_module(f"server.routes.{source.stem}")
        tree = ast.parse(source.read_text())
        queries = {"query_params"} | {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                                      and isinstance(node.value, ast.Attribute) and node.value.attr == "query_params"
                                      for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"):
                continue
            on = node.func.value
            if (on.attr if isinstance(on, ast.Attribute) else getattr(on, "id", None)) not in queries:
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant):
                read.add(arg.value)
            else:  # a declared parameter's name: ``STREAM.name``
                assert isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name), ast.unparse(node)
                read.add(getattr(module, arg.value.id).name)
    declared = {q.name for r in all_routes() for q in r.query}
    assert read == declared and "starting_after" in declared


@pytest.mark.parametrize("kind", ["integer", "boolean", "enum"])
def test_a_query_value_outside_its_declared_schema_is_a_400_naming_it_and_one_inside_is_not(
        front: TestClient, kind: str) -> None:
    doc = front.get("/openapi.json").json()
    tried = 0
    for path, method, op in _operations(doc):
        for name, schema in _query(op).items():
            if schema.get("type") != kind and not (kind == "enum" and "enum" in schema):
                continue
            if kind == "integer":
                bad, good = [str(schema["minimum"] - 1), str(schema["maximum"] + 1), "1.5", "x", "\u00b2"], \
                    [str(schema["minimum"]), str(schema["maximum"])]
            elif kind == "boolean":
                bad, good = ["maybe", "2"], ["true", "false"]
            else:
                bad, good = ["sideways"], list(schema["enum"])
            for value in bad:
                r = front.request(method, path, params={name: value})
                assert r.status_code == 400 and r.json()["error"]["param"] == name, (path, name, value, r.text)
            for value in good:
                r = front.request(method, path, params={name: value})
                assert r.status_code < 500, (path, name, value, r.text)
                assert r.status_code != 400 or r.json()["error"]["param"] != name, (path, name, value, r.text)
            tried += 1
    assert tried, f"no {kind} query parameter in the document"


def test_only_the_methods_that_can_stream_declare_an_event_stream(front: TestClient) -> None:
    ops = front.get("/openapi.json").json()["paths"]["/v1/responses/{response_id}"]
    get, delete = (ops[m]["responses"]["200"]["content"] for m in ("get", "delete"))
    assert set(get) == {"application/json", "text/event-stream"}
    assert get["application/json"]["schema"] == {"$ref": "#/components/schemas/ResponseObject"}
    assert delete == {"application/json": {"schema": {"$ref": "#/components/schemas/ResponseDeleted"}}}
    assert "parameters" in ops["delete"] and not _query(ops["delete"])
