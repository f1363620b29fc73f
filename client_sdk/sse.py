"""A server-sent events decoder (the subset the HTTP endpoints write), sans-I/O: feed it lines,
get ``(event, data)`` pairs when a blank line ends an event."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class SSEDecoder:
    _event: str = ""
    _data: list[str] = field(default_factory=list)

    def line(self, line: str) -> tuple[str, str] | None:
        line = line.rstrip("\r\n")
        if not line:
            if not self._data and not self._event:
                return None
            out = (self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return out
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None
