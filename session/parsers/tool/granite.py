"""IBM Granite tool calls: ``granite`` (Granite 3.x, a JSON list after a marker) and ``granite4``
(Granite 4, ``<tool_call>{json}</tool_call>`` blocks).

The full rules: docs/parsers.md (the family's section: its split, state and every difference from vLLM).
"""

from __future__ import annotations

from typing import Any

from ..base import ParserContext
from ..markers import find_first, held_suffix_len
from .json_stream import JSON_WS
from .single_call import SingleCallToolParser
from .streaming import StreamingToolParser

START = "<tool_call>"
END = "</tool_call>"
GRANITE3_TOKEN = "<|tool_call|>"


class Granite4ToolParser(SingleCallToolParser):
    """Modes: ``text`` (content outside blocks), ``call`` (reading a block's JSON), ``tail`` (JSON
    done, expecting ``</tool_call>``), ``skip`` (dropping a broken block after a call was made, up
    to its ``</tool_call>``), ``raw`` (fallen back: all is content).

    Differs from vLLM: a block that breaks after a call was announced (bad JSON later in it, no
    ``</tool_call>`` because the output was cut short, a second broken block) keeps the calls made
    with the arguments read so far and drops the broken rest of that block — vLLM's non-streaming
    parser would return the whole output as content, its streaming one drops the broken block
    (and sends nothing of a call whose block never closes). A ``</tool_call>`` inside a JSON string
    is part of the string (vLLM cuts the block there). String arguments are sent as their JSON
    text (vLLM passes the string itself on)."""

    name = "granite4"
    needs_special_tokens = True  # vLLM decodes with special tokens for this parser (some Granites mark <tool_call> special)

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._ws = ""  # whitespace-only content held while no other content came
        self._seen = False  # content other than whitespace was sent

    def _save(self) -> dict[str, Any]:
        state = super()._save()
        state.update(w=self._ws, t=self._seen)
        return state

    def _load(self, state: dict[str, Any]) -> None:
        super()._load(state)
        self._ws, self._seen = str(state["w"]), bool(state["t"])

    def plain_content_guard(self) -> str | None:
        if self._buf or not self._seen:
            return None
        return {"text": "<", "raw": ""}.get(self._mode)

    def _say(self, text: str) -> None:
        """Content, except that whitespace is held until other content comes (content that is
        only whitespace is dropped when calls were made)."""
        if not text:
            return
        if self._seen:
            self._content(text)
        elif text.strip():
            self._content(self._ws + text)
            self._ws, self._seen = "", True
        else:
            self._ws += text

    def _fall_back(self, rest: str) -> None:
        self._say(self._raw + rest)
        self._mode, self._raw, self._obj = "raw", "", None

    def _process(self, text: str, final: bool) -> None:
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while True:
            mode = self._mode
            if mode == "raw":
                self._say(buf[i:])
                break
            if mode in ("text", "skip"):
                marker = END if mode == "skip" else START
                pos = buf.find(marker, i)
                if pos == -1:
                    keep = 0 if final else held_suffix_len(buf[max(i, n - len(marker)):], (marker,))
                    if mode == "text":
                        self._say(buf[i : n - keep])
                    self._buf = buf[n - keep :]
                    break
                if mode == "text":
                    self._say(buf[i:pos])
                    i = pos + len(marker)
                    self._begin_call(START)
                else:
                    i = pos + len(marker)
                    self._mode = "text"
                continue
            i = self._block_step(buf, i, final, END, "text")  # call, tail
            if i < 0:
                break
        if final and self._ws and not self._seen:
            if self._calls == 0:
                self._content(self._ws)
            self._ws = ""


_NAME_PAT = '"name"'
_ARGS_KEY = "arguments"


class GraniteToolParser(StreamingToolParser):
    """Modes: ``text`` (content, looking for a marker), ``open`` (after a marker, ``[``
    expected), ``list`` (between elements), ``elem`` (inside a ``{…}`` element).

    The element reader keeps (snapshot ``e``): the bracket depth as vLLM's engine counts it (where
    the element ends) and as its ``arguments`` scanner counts it, string / escape flags, how much
    of ``"arguments"`` the current depth-1 string has matched, where the arguments are (not seen,
    value expected, inside the object span with its brace depth, done), the candidates of vLLM's
    name regex ``"name"\\s*:\\s*"([^"]*)"`` and the name once found, and (``a``) argument text that
    came before the name (announced with the call). Content keeps ``w`` (whitespace held: it is
    stripped when calls were made) and ``t`` (other content was sent).

    Differs from vLLM:

    - text after the array is content (vLLM's non-streaming answer drops it; its stream sends it);
      so is whitespace between content and a call when more content follows;
    - the content's leading whitespace is not stripped when content other than whitespace came
      before the first call (it was sent before the call was known);
    - the arguments are the model's text as it came; vLLM re-serializes them with values coerced
      to the tool's schema types when a value's type disagrees (``"3"`` for an integer parameter;
      its own stream then cuts the arguments short);
    - an ``arguments`` member that is not an object is sent as its canonical JSON (vLLM: its
      ``json.dumps``, or the string itself; a stream sends nothing);
    - an element whose first ``"name": "…"`` is empty is no call (vLLM would read the name from
      the element's JSON).

    ``engine_based``: with ``tool_choice: "none"`` or no tools this parser still reads the output
    and its calls are dropped (the call text never reaches the content), as vLLM does when no
    plain (non-engine) reasoning parser is configured with it.
    """

    name = "granite"
    needs_special_tokens = True  # <|tool_call|> is a special token; vLLM decodes with special tokens
    engine_based = True  # vLLM 0.32 builds it from its engine grammar (vllm/parser/granite.py)

    def __init__(self, ctx: ParserContext) -> None:
        super().__init__(ctx)
        self._pend = ""  # whitespace content held back
        self._seen = False  # content other than whitespace was sent
        self._pre_args = ""  # argument text read before the element's name was found
        self._elem: list[Any] = []

    def _save(self) -> dict[str, Any]:
        return {"w": self._pend, "t": self._seen, "a": self._pre_args, "e": self._elem}

    def _load(self, state: dict[str, Any]) -> None:
        self._pend, self._seen, self._pre_args = str(state["w"]), bool(state["t"]), str(state["a"])
        elem = state["e"]
        if not isinstance(elem, list) or (elem and len(elem) != 11):
            raise ValueError("element state")
        self._elem = list(elem)

    # -- content -----------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        if not text:
            return
        text, self._pend = self._pend + text, ""
        core = text.rstrip()
        if not core:
            self._pend = text
            return
        tail = text[len(core):]
        if not self._seen and self._calls:  # the content's leading whitespace, after a call
            core = core.lstrip()
        self._content(core)
        self._pend, self._seen = tail, True

    # -- the element -------------------------------------------------------------------------
    # _elem: [depth, sdepth, in_str, esc, key, last_args, aphase, bdepth, cands, name, named]
    #   depth   engine depth over {[ / }] (not below 0): the element ends at a "}" that leaves it 0
    #   sdepth  the arguments scanner's depth (may go below 0)
    #   key     chars of "arguments" the current depth-1 string matched (-1: it does not match)
    #   last_args  the last complete depth-1 string was "arguments"
    #   aphase  0 not seen, 1 value expected, 2 in the object span, 3 done
    #   bdepth  brace depth inside the span
    #   cands   name regex candidates [[stage, value], ...] (stage 0-5 in '"name"', 6 ws, 7 ws, 8 value)
    #   name    the name found (None: not yet; "": the first match was empty)
    def _open_elem(self) -> None:
        self._elem = [0, 0, False, False, -1, False, 0, 0, [], None, False]
        self._pre_args = ""

    def _args(self, text: str, named: bool) -> None:
        if not text:
            return
        if named:
            self.add_args(text)
        else:
            self._pre_args += text

    def _feed_elem(self, buf: str, i: int) -> int:
        """Read the element from ``buf[i]``; returns where it stopped (after its closing ``}``,
        or ``len(buf)``)."""
        e = self._elem
        depth, sdepth, in_str, esc, key, last_args, aphase, bdepth, cands, name, named = e
        n = len(buf)
        span_from = i if aphase == 2 else -1
        ended = False
        while i < n:
            c = buf[i]
            i += 1
            # vLLM's name regex, on the raw text
            if name is None:
                alive = []
                found = None
                for cand in cands:
                    stage = cand[0]
                    if stage < 6:
                        if c == _NAME_PAT[stage]:
                            cand[0] = stage + 1
                            alive.append(cand)
                    elif stage == 6 or stage == 7:
                        if c.isspace():
                            alive.append(cand)
                        elif c == ":" and stage == 6:
                            cand[0] = 7
                            alive.append(cand)
                        elif c == '"' and stage == 7:
                            cand[0] = 8
                            alive.append(cand)
                    elif c == '"':
                        if found is None:
                            found = cand[1]
                    else:
                        cand[1] += c
                        alive.append(cand)
                if c == '"':
                    alive.append([1, ""])
                cands = alive
                if found is not None:
                    name, cands = found, []
                    if found:
                        if span_from >= 0:
                            self._args(buf[span_from : i - 1], False)
                            span_from = i - 1
                        self.open_call(found)
                        named = True
                        self.add_args(self._pre_args)
                        self._pre_args = ""
            # strings (shared by the element and the arguments scanner)
            if esc:
                esc = False
                continue
            if in_str:
                if c == "\\":
                    esc = True
                elif c == '"':
                    in_str = False
                    if sdepth == 1 and aphase == 0:
                        last_args = key == len(_ARGS_KEY)
                elif sdepth == 1 and aphase == 0 and key >= 0:
                    key = key + 1 if key < len(_ARGS_KEY) and c == _ARGS_KEY[key] else -1
                continue
            if c == '"':
                in_str = True
                key = 0
                continue
            if aphase == 1:
                if c in JSON_WS:
                    continue
                if c == "{":
                    aphase, bdepth, span_from = 2, 0, i - 1
                else:
                    aphase = 3  # not an object: no arguments text
            if aphase == 2:
                if c == "{":
                    bdepth += 1
                elif c == "}":
                    bdepth -= 1
                    if bdepth == 0:
                        self._args(buf[span_from:i], named)
                        span_from, aphase = -1, 3
            if c in "{[":
                depth += 1
                sdepth += 1
            elif c in "}]":
                sdepth -= 1
                if depth > 0:
                    depth -= 1
                if c == "}" and depth == 0:
                    ended = True
                    break
            elif c == ":" and sdepth == 1 and aphase == 0 and last_args:
                aphase = 1
        if span_from >= 0:
            self._args(buf[span_from:i], named)
        e[:] = [depth, sdepth, in_str, esc, key, last_args, aphase, bdepth, cands, name, named]
        if ended:
            self._end_elem()
        return i

    def _end_elem(self) -> None:
        """The element closed (or the output ended inside it)."""
        e = self._elem
        if e and e[10] and e[6] < 2:  # a call without an arguments object
            self.add_args("{}")
        self._elem, self._pre_args = [], ""
        if self._mode == "elem":
            self._mode = "list"

    # -- reading -----------------------------------------------------------------------------
    def _process(self, text: str, final: bool) -> None:
        buf, self._buf = self._buf + text, ""
        i, n = 0, len(buf)
        while i < n:
            mode = self._mode
            if mode == "text":
                pos, marker = find_first(buf, (GRANITE3_TOKEN, START), i)
                if pos == -1:
                    keep = 0 if final else held_suffix_len(buf[max(i, n - len(GRANITE3_TOKEN)):],
                                                           (GRANITE3_TOKEN, START))
                    self._say(buf[i : n - keep])
                    self._buf = buf[n - keep :]
                    break
                self._say(buf[i:pos])
                self._mode, i = "open", pos + len(marker)
                continue
            if mode == "elem":
                i = self._feed_elem(buf, i)
                continue
            c = buf[i]
            if c in JSON_WS:
                i += 1
            elif mode == "open":
                if c == "[":
                    self._mode, i = "list", i + 1
                else:
                    self._mode = "text"  # not an array: this character and the rest are content
                    self._say(c)
                    i += 1
            elif c == ",":
                i += 1
            elif c == "{":
                self._mode = "elem"
                self._open_elem()
            elif c == "]":
                self._mode, i = "text", i + 1
            else:
                self._mode = "text"
                self._say(c)
                i += 1
        if final:
            if self._mode == "elem":
                self._end_elem()
                self._mode = "text"
            if self._pend and not self._calls:
                self._content(self._pend)
            self._pend = ""
