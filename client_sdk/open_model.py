"""The base of the results client_sdk models itself (client_sdk/types.py's Messages API shapes,
client_sdk/response_types.py's Responses API shapes): models that keep the fields they do not
list, unions told apart by ``type`` (a type this client does not know is the union's
``Unknown…``), and a stream event parsed by its ``type``. How they read: docs/client.md."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict


class OpenModel(BaseModel):
    """A model that keeps the fields it does not list (``extra``), as a server may add them."""

    model_config = ConfigDict(extra="allow")


def type_tag(known: frozenset[str]) -> Callable[[Any], str]:
    """A union's discriminator: the value's ``type`` where it is one of ``known``, else ``"unknown"``."""
    def tag(value: Any) -> str:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return kind if kind in known else "unknown"

    return tag


def parse_by_type(events: Mapping[str, type[BaseModel]], unknown: type[BaseModel],
                  event: dict[str, Any]) -> BaseModel:
    """``event`` as the model ``events`` names for its ``type`` (``unknown`` for any other)."""
    return events.get(str(event.get("type")), unknown).model_validate(event)
