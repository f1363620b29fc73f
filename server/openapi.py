"""The OpenAPI document, built from the same route list the app registers, so that it says what the
server really accepts and answers (``tests/e2e/test_http_fuzz.py`` checks it with schemathesis):
named models as components, :data:`REFINEMENTS` for the validators' rules beyond the field types,
each API's error envelope, the query parameters each route reads (``Route.query``), SSE event shapes
on the methods that can stream (``Route.streams``). What is in the document and what stays out on
purpose: docs/reliability.md, "HTTP fuzzing".
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter

from server.routing import Route
from session.protocol.responses import INCLUDE_VALUES

_OPENAI_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["integer", "string", "null"]},
            },
            "required": ["message", "type"],
        }
    },
    "required": ["error"],
}
_ANTHROPIC_ERROR = {
    "type": "object",
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
            "required": ["type", "message"],
        },
    },
    "required": ["type", "error"],
}
_SSE_EVENT = {
    "type": "object",
    "description": "One server-sent event. `data` is a JSON document (a stream chunk, or an error envelope "
                   "after the stream started), or `[DONE]` at the end of an OpenAI-style stream.",
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "id": {"type": "string"},
    },
    "required": ["data"],
}

Schema = dict[str, Any]


def _prop(schema: Schema, name: str, change: Callable[[Schema], Schema]) -> None:
    props = schema.get("properties", {})
    if name in props:
        props[name] = change(props[name])


def _non_empty(prop: Schema) -> Schema:
    """Arrays inside ``prop`` (or ``prop`` itself) need at least one item."""
    members = prop.get("anyOf")
    if members is None:
        return {**prop, "minItems": 1} if prop.get("type") == "array" else prop
    return {**prop, "anyOf": [_non_empty(m) for m in members]}


def _not_null(prop: Schema) -> Schema:
    members = [m for m in prop.get("anyOf", ()) if m.get("type") != "null"]
    if not members:
        return prop
    out = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
    return {**out, **members[0]} if len(members) == 1 else {**out, "anyOf": members}


def _require(schema: Schema, *names: str) -> None:
    schema["required"] = sorted({*schema.get("required", ()), *names})


def _only_null(description: str) -> Callable[[Schema], Schema]:
    def change(prop: Schema) -> Schema:
        return {"type": "null", "default": None, "description": description}
    return change


def _only_false(prop: Schema) -> Schema:
    return {"const": False, "default": False, "description": "Beam search is not supported."}


def _chat_request(s: Schema) -> None:
    _prop(s, "messages", _non_empty)  # session.render.template: "messages must contain at least one message"
    # Renderer: a request's own chat template needs --trust-request-chat-template, which tokenwire
    # does not offer; beam search is refused.
    _prop(s, "chat_template", _only_null("Refused: this server does not trust request chat templates."))
    _prop(s, "use_beam_search", _only_false)


def _tokenize_chat_request(s: Schema) -> None:
    _prop(s, "chat_template", _only_null("Refused: this server does not trust request chat templates."))


def _messages_request(s: Schema) -> None:
    _prop(s, "messages", _non_empty)  # the same rule for Anthropic bodies


def _completion_request(s: Schema) -> None:
    # CompletionRequest._has_prompt and Renderer.render_completion: a prompt is required (non-empty),
    # and prompt_embeds are refused.
    _prop(s, "prompt", lambda p: _non_empty(_not_null(p)))
    _require(s, "prompt")
    _prop(s, "prompt_embeds", _only_null("Not supported by tokenwire: send text or token ids."))
    _prop(s, "suffix", _only_null("suffix is not supported."))
    _prop(s, "use_beam_search", _only_false)


def _derender_completion_request(s: Schema) -> None:
    _prop(s, "generate_responses", _non_empty)  # DerenderService.completion


def _generate_stream_response(s: Schema) -> None:
    # DerenderService._usage_only: a chunk without choices is the usage-only chunk, so it has usage.
    s["anyOf"] = [{"properties": {"choices": {"minItems": 1}}},
                  {"properties": {"usage": {"type": "object"}}, "required": ["usage"]}]


def _responses_request(s: Schema) -> None:
    # session.protocol.responses: refused values, and the input list needs an item
    _prop(s, "input", _non_empty)
    _prop(s, "background", lambda p: {**p, "description": "Run the response in the background (needs store: "
                                      "true; HTTP only)."})
    _prop(s, "conversation", _only_null("Not supported: chain responses with previous_response_id."))
    _prop(s, "prompt", _only_null("Prompt templates are not supported."))
    _prop(s, "include", lambda p: {"anyOf": [{"type": "array", "items": {"enum": list(INCLUDE_VALUES)}},
                                             {"type": "null"}], "default": None})


REFINEMENTS: dict[str, Callable[[Schema], None]] = {
    "ResponsesRequest": _responses_request,
    "ChatCompletionRequest": _chat_request,
    "MessagesRequest": _messages_request,
    "TokenizeChatRequest": _tokenize_chat_request,
    "CompletionRequest": _completion_request,
    "DerenderCompletionRequest": _derender_completion_request,
    "GenerateStreamResponse": _generate_stream_response,
}


def _schema(model: Any, defs: dict[str, Any]) -> Schema:
    """The JSON schema of ``model``, with every named model (``model`` too) in ``defs``."""
    schema = TypeAdapter(model).json_schema(ref_template="#/components/schemas/{model}")
    defs.update(schema.pop("$defs", {}))
    name = getattr(model, "__name__", None)
    if schema.get("type") == "object" and name and schema.get("title") == name:
        defs[name] = schema
        return {"$ref": f"#/components/schemas/{name}"}
    return schema


JSON_INTEGERS = (-(2**63), 2**64 - 1)  # what the JSON parser (orjson) reads as an integer


def _bound_integers(node: Any) -> Any:
    """Integers without bounds get the JSON parser's: a body with a wider one is not read (400), and a
    value the server echoes is one it read."""
    if isinstance(node, dict):
        node = {k: _bound_integers(v) for k, v in node.items()}
        if node.get("type") == "integer":
            node.setdefault("minimum", JSON_INTEGERS[0])
            node.setdefault("maximum", JSON_INTEGERS[1])
        return node
    if isinstance(node, list):
        return [_bound_integers(v) for v in node]
    return node


def _refine(defs: dict[str, Any]) -> None:
    for name, refine in REFINEMENTS.items():
        if name in defs:
            defs[name] = copy.deepcopy(defs[name])
            refine(defs[name])
    for name in list(defs):
        defs[name] = _bound_integers(defs[name])


def _error_ref(route: Route) -> Schema:
    name = "AnthropicError" if route.path.startswith("/v1/messages") else "Error"
    return {"$ref": f"#/components/schemas/{name}"}


def openapi_path(route_path: str) -> str:
    """A route's path as the document names it: a Starlette convertor (``{response_id:response_id}``)
    is not part of the path."""
    return re.sub(r"{(\w+):\w+}", r"{\1}", route_path)


def build_openapi(routes: list[Route], *, version: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    defs: dict[str, Any] = {"Error": _OPENAI_ERROR, "AnthropicError": _ANTHROPIC_ERROR}
    for route in routes:
        path = openapi_path(route.path)
        for method in route.methods:
            op: dict[str, Any] = {
                "summary": route.summary or route.path,
                "operationId": f"{method.lower()}_{re.sub('[{}]', '', path).strip('/').replace('/', '_') or 'root'}",
                "tags": list(route.tags or (route.group.value,)),
                "responses": {
                    "default": {"description": "Error",
                                "content": {"application/json": {"schema": _error_ref(route)}}},
                },
            }
            ok: dict[str, Any] = {"description": "OK"}
            model = route.response_model
            if isinstance(model, dict):  # a model per method
                model = model[method]
            if model is not None:
                ok["content"] = {"application/json": {"schema": _schema(model, defs)}}
            if route.content_type is not None:
                ok["content"] = {route.content_type: {"schema": {"type": "string"}}}
            if method in route.streams:
                ok.setdefault("content", {})["text/event-stream"] = {"schema": {"$ref": "#/components/schemas/SSEEvent"}}
                defs["SSEEvent"] = _SSE_EVENT
            op["responses"]["200"] = ok
            for status, description, model in route.responses:
                op["responses"][str(status)] = {
                    "description": description,
                    "content": {"application/json": {"schema": _schema(model, defs)}}}
            params = [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                      for n in re.findall(r"{(\w+)}", path)]  # path parameters (``/v1/responses/{response_id}``)
            params += [{"name": q.name, "in": "query", "required": False, "schema": q.schema,
                        "description": q.description} for q in route.query if method in q.methods]
            if params:
                op["parameters"] = params
            if route.request_model is not None and method in ("POST", "PUT", "PATCH"):
                op["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": _schema(route.request_model, defs)}},
                }
                # server/http.py: a body without Content-Type: application/json is not read
                op["responses"]["415"] = {
                    "description": "The body was not sent as application/json (no Content-Type, text/plain, a form)",
                    "content": {"application/json": {"schema": _error_ref(route)}}}
            paths.setdefault(path, {})[method.lower()] = op
    _refine(defs)
    return {
        "openapi": "3.1.0",
        "info": {"title": "tokenwire", "version": version},
        "paths": paths,
        "components": {"schemas": defs},
    }
