"""Hypothesis strategies for WebSocket session messages, good and bad (``tests/e2e/test_ws_fuzz.py``,
``python -m bench.fuzz ws``).

A drawn :class:`Message` is what a client puts on the wire (a text or binary message, as bytes)
plus the outcome docs/protocol.md promises for it: ``None`` for a message the session answers and
lives on (valid frames, frames with wrong, missing or extra fields, unknown types, valid frames in
an illegal order), or the close code for a protocol violation (binary 1003, invalid UTF-8 or JSON
1007, not an object / no string ``type`` 1002).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import strategies as st

FRAME_TYPES = ("session.update", "render", "generate", "derender", "chat", "completion", "messages", "response",
               "cancel", "ping")
KNOWN_FIELDS = ("type", "event_id", "id", "kind", "body", "session", "resume", "resumable")
IDS = ("a", "b", "c")  # a small pool, so frames collide: duplicates, cancels of running and finished ids


@dataclass(frozen=True)
class Message:
    data: bytes
    text: bool  # a text message (else binary)
    close: int | None  # the close code the protocol promises, or None: the session lives on

    def __repr__(self) -> str:
        kind = "text" if self.text else "binary"
        return f"Message({kind}, close={self.close}, {self.data[:160]!r})"


# -- JSON values ----------------------------------------------------------------------------------
huge_ints = st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), 2**1023])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), huge_ints,
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
                    st.sampled_from(["", "\x00", "\ud800", "a" * 300, "<think>", "</tool_call>", "🙂" * 10]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=12), inner, max_size=5)), max_leaves=25)


JSON_DEPTH_LIMIT = 1024  # orjson's: deeper text is not read as JSON (the session closes with 1007)


def deep_frame(depth: int) -> Message:
    """A chat frame whose body nests ``depth`` arrays (written as text: no recursion)."""
    data = ('{"type":"chat","id":"a","body":{"messages":' + "[" * depth + "]" * depth + "}}").encode()
    return Message(data, True, 1007 if depth + 2 > JSON_DEPTH_LIMIT else None)


# -- plausible bodies (cheap for the tiny engine) --------------------------------------------------
small_ids = st.lists(st.integers(0, 2000), min_size=1, max_size=8)
sampling = st.fixed_dictionaries({}, optional={
    "max_tokens": st.one_of(st.integers(-2, 6), huge_ints), "temperature": st.one_of(st.floats(-1, 3), scalars),
    "seed": st.integers(-5, 2**64), "stop": st.one_of(st.text(max_size=4), st.lists(st.text(max_size=3), max_size=3)),
    "n": st.integers(0, 3), "logprobs": st.one_of(st.integers(-1, 3), st.booleans()), "top_k": st.integers(-2, 5)})
chat_body = st.builds(lambda msgs, extra: {"messages": msgs, "max_tokens": 4, **extra},
                      st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "x"]),
                                                      "content": st.one_of(st.text(max_size=30), json_values)}),
                               max_size=3),
                      sampling)
completion_body = st.builds(lambda prompt, extra: {"prompt": prompt, "max_tokens": 4, **extra},
                            st.one_of(st.text(max_size=30), small_ids, json_values), sampling)
messages_body = st.builds(lambda msgs, mt: {"messages": msgs, "max_tokens": mt},
                          st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                                                          "content": st.text(max_size=30)}), max_size=3),
                          st.one_of(st.integers(-1, 4), scalars))
response_extra = st.fixed_dictionaries({}, optional={
    "temperature": st.one_of(st.floats(-1, 3), scalars), "top_p": scalars, "store": st.one_of(st.booleans(), scalars),
    "previous_response_id": st.one_of(st.text(max_size=12), scalars), "include": st.one_of(st.just(
        ["reasoning.encrypted_content"]), json_values), "tools": json_values, "background": st.booleans(),
    "instructions": st.one_of(st.text(max_size=20), scalars), "max_output_tokens": st.one_of(st.integers(-1, 4), scalars)})
response_body = st.builds(lambda inp, extra: {"input": inp, "max_output_tokens": 4, **extra},
                          st.one_of(st.text(max_size=30), json_values, st.lists(st.fixed_dictionaries({
                              "role": st.sampled_from(["user", "assistant", "developer", "system", "x"]),
                              "content": st.one_of(st.text(max_size=30), json_values)}), max_size=3),
                              st.lists(st.fixed_dictionaries({
                                  "type": st.sampled_from(["function_call_output", "function_call", "reasoning",
                                                           "message", "bogus"]),
                                  "call_id": st.text(max_size=8)}, optional={
                                  "output": st.text(max_size=8), "name": st.text(max_size=8),
                                  "arguments": st.text(max_size=8), "encrypted_content": st.text(max_size=20)}),
                                  max_size=2)),
                          response_extra)
generate_body = st.builds(lambda ids, sp: {"token_ids": ids, "sampling_params": {"max_tokens": 4, **sp}},
                          st.one_of(small_ids, json_values), sampling)
derender_body = st.fixed_dictionaries(
    {"generate_chunk": st.one_of(json_values, st.builds(
        lambda ids: {"request_id": "x", "choices": [{"index": 0, "token_ids": ids}]}, small_ids))},
    optional={"stream_state": st.one_of(st.text(max_size=60), st.just("tw1.x.e30.y"), scalars),
              "prompt_token_ids": small_ids, "chat_request": json_values})
bodies = {"chat": chat_body, "completion": completion_body, "messages": messages_body, "response": response_body,
          "generate": generate_body,
          "render": st.one_of(chat_body, completion_body), "derender": derender_body}
ids = st.one_of(st.sampled_from(IDS), st.text(max_size=140), scalars)


@st.composite
def plausible_frame(draw: st.DrawFn) -> dict[str, Any]:
    """A frame of a known type, usually valid, sometimes with one field wrong, missing or extra."""
    kind = draw(st.sampled_from(FRAME_TYPES))
    frame: dict[str, Any] = {"type": kind}
    if kind in bodies:
        frame["id"] = draw(st.sampled_from(IDS))
        frame["body"] = draw(bodies[kind])
        if kind in ("render", "derender"):
            frame["kind"] = draw(st.sampled_from(["chat", "completion", "messages", "bogus"]))
    elif kind == "cancel":
        frame["id"] = draw(st.sampled_from(IDS))
    elif kind == "session.update":
        frame["session"] = draw(st.fixed_dictionaries({}, optional={
            "model": st.one_of(st.none(), st.text(max_size=10)), "sampling": st.one_of(sampling, json_values),
            "resumable": st.one_of(st.booleans(), scalars), "chat_template_kwargs": json_values}))
    if draw(st.booleans()):
        frame["event_id"] = draw(st.one_of(st.text(max_size=20), st.text(min_size=129, max_size=140), scalars))
    mutation = draw(st.sampled_from(["none", "none", "drop", "retype", "extra"]))
    if mutation == "drop" and len(frame) > 1:
        frame.pop(draw(st.sampled_from(sorted(k for k in frame if k != "type"))))
    elif mutation == "retype":
        frame[draw(st.sampled_from(KNOWN_FIELDS[1:]))] = draw(json_values)
    elif mutation == "extra":
        frame[draw(st.text(min_size=1, max_size=10))] = draw(json_values)
    return frame


def _text(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS) if _orjson_ok(value) else _json_module(value)


def _orjson_ok(value: Any) -> bool:
    try:
        orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return False
    return True


def _json_module(value: Any) -> bytes:
    import json

    # lone surrogates and huge ints: the stdlib writes them (as \ud800 escapes and digits)
    return json.dumps(value).encode()


def frame_message(frame: dict[str, Any]) -> Message:
    return Message(_text(frame), True, None)


live_frames = st.builds(frame_message, plausible_frame())
odd_type_frames = st.builds(lambda t, rest: frame_message({**rest, "type": t}),
                            st.text(min_size=0, max_size=20).filter(lambda t: t not in FRAME_TYPES),
                            st.dictionaries(st.sampled_from(KNOWN_FIELDS[1:]), json_values, max_size=3))
deep_frames = st.builds(deep_frame, st.sampled_from([50, 500, 1000]))
deep_fatal = st.builds(deep_frame, st.sampled_from([1100, 5000, 100_000]))
fatal_messages = st.one_of(
    deep_fatal,
    st.builds(lambda b: Message(b, False, 1003), st.binary(max_size=64)),
    st.builds(lambda b: Message(b"{\"type\": \"ping\", \"event_id\": \"" + b + b"\"}", True, 1007),
              st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"])),
    st.builds(lambda t: Message(t.encode(), True, 1007),
              st.text(alphabet=string.printable, max_size=40).filter(lambda t: not _is_json(t))),
    st.builds(lambda v: Message(_text(v), True, 1002),
              st.one_of(scalars, st.lists(json_values, max_size=3)).filter(lambda v: not isinstance(v, dict))),
    st.builds(lambda d: Message(_text(d), True, 1002),
              st.dictionaries(st.text(max_size=8).filter(lambda k: k != "type"), json_values, max_size=3)),
    st.builds(lambda v: Message(_text({"type": v}), True, 1002), st.one_of(st.none(), st.integers(), st.lists(
        st.text(max_size=3), max_size=2), st.booleans())),
)


def _is_json(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


live_messages = st.one_of(live_frames, live_frames, odd_type_frames, deep_frames)
# A session's worth of messages: mostly ones it lives through, sometimes ending in a violation.
sequences = st.builds(lambda live, last: [*live, *([last] if last is not None else [])],
                      st.lists(live_messages, min_size=1, max_size=12),
                      st.one_of(st.none(), st.none(), fatal_messages))
