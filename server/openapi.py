"""The OpenAPI document, built from the same route list the app registers."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from server.routes import Route

_ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["integer", "null"]},
            },
            "required": ["message", "type"],
        }
    },
    "required": ["error"],
}


def _schema(model: Any, defs: dict[str, Any]) -> dict[str, Any]:
    schema = TypeAdapter(model).json_schema(ref_template="#/components/schemas/{model}")
    defs.update(schema.pop("$defs", {}))
    return schema


def build_openapi(routes: list[Route], *, version: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    defs: dict[str, Any] = {"Error": _ERROR_SCHEMA}
    for route in routes:
        for method in route.methods:
            op: dict[str, Any] = {
                "summary": route.summary or route.path,
                "operationId": f"{method.lower()}_{route.path.strip('/').replace('/', '_') or 'root'}",
                "tags": list(route.tags or (route.group.value,)),
                "responses": {
                    "default": {
                        "description": "Error",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                    }
                },
            }
            ok: dict[str, Any] = {"description": "OK"}
            if route.response_model is not None:
                ok["content"] = {"application/json": {"schema": _schema(route.response_model, defs)}}
            if route.streams:
                ok.setdefault("content", {})["text/event-stream"] = {"schema": {"type": "string"}}
            op["responses"]["200"] = ok
            if route.request_model is not None and method in ("POST", "PUT", "PATCH"):
                op["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": _schema(route.request_model, defs)}},
                }
            paths.setdefault(route.path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "tokenwire", "version": version},
        "paths": paths,
        "components": {"schemas": defs},
    }
