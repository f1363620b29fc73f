"""What the reasoning parsers share: the feed / finish / snapshot / restore frame of a parser
whose state is a mode and held-back text (:class:`ModalReasoningParser`), the reasoning's trailing
whitespace held back until more reasoning follows (:func:`hold_trailing_space`), and the
``thinking`` / ``enable_thinking`` switch of the engine grammars that default to thinking on
(:func:`thinking_enabled`).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Self

from ..base import ParsedDelta, ParserContext, ReasoningParser
from ..errors import MalformedSnapshot


class ModalReasoningParser(ReasoningParser):
    """A reasoning parser whose state is ``_mode`` (one of ``modes``), ``_buf`` (text held back:
    a partial marker) and what ``_save`` adds; ``feed`` / ``finish`` are ``_process(text, final)``.

    Snapshot: ``{"p": name, "m": mode, "b": held text, **_save()}``; ``restore`` refuses another
    parser's snapshot, an unknown mode, or anything ``_load`` refuses (``KeyError`` /
    ``TypeError`` / ``ValueError``) with :class:`MalformedSnapshot`.
    """

    modes: ClassVar[tuple[str, ...]] = ("reasoning", "content")

    _mode: str
    _buf: str

    @property
    def reasoning_ended(self) -> bool:
        return self._mode == "content"

    def feed(self, text: str) -> ParsedDelta:
        return self._process(text, final=False)

    def finish(self) -> ParsedDelta:
        return self._process("", final=True)

    def snapshot(self) -> dict[str, Any]:
        state: dict[str, Any] = {"p": self.name, "m": self._mode, "b": self._buf}
        state.update(self._save())
        return state

    @classmethod
    def restore(cls, ctx: ParserContext, snapshot: dict[str, Any]) -> Self:
        if not isinstance(snapshot, dict) or snapshot.get("p") != cls.name:
            raise MalformedSnapshot(f"not a {cls.name} reasoning parser snapshot")
        parser = cls(ctx)
        try:
            mode = snapshot["m"]
            if mode not in cls.modes:
                raise ValueError(mode)
            parser._mode, parser._buf = mode, str(snapshot["b"])
            parser._load(snapshot)
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedSnapshot(f"malformed {cls.name} reasoning parser snapshot") from exc
        return parser

    # -- for subclasses ----------------------------------------------------------------------
    @abc.abstractmethod
    def _process(self, text: str, final: bool) -> ParsedDelta: ...

    def _save(self) -> dict[str, Any]:
        """The rest of the state, for the snapshot."""
        return {}

    def _load(self, state: dict[str, Any]) -> None:
        """The rest of the state, from a snapshot (raise KeyError / TypeError / ValueError when
        it is malformed)."""
        return None


def hold_trailing_space(held: str, reasoning: str, cap: int | None = None) -> tuple[str, str]:
    """``(to send, to hold)``: reasoning text with its trailing whitespace held back (``held`` is
    what was held before, which goes first). With a ``cap``, a held run longer than it is sent
    but for its last ``cap`` characters (the state stays small)."""
    if not reasoning:
        return "", held
    text = held + reasoning
    sent = text.rstrip()
    hold = text[len(sent):]
    if cap is not None and len(hold) > cap:
        sent, hold = sent + hold[:-cap], hold[-cap:]
    return sent, hold


def thinking_enabled(kwargs: dict[str, Any]) -> bool:
    """vLLM 0.32's ``thinking_enabled`` of its GLM-4.7 and Kimi-K2 grammars, for a request's
    ``chat_template_kwargs``: on when neither ``thinking`` nor ``enable_thinking`` is given (or
    both are null), else on when either is truthy."""
    thinking, enable = kwargs.get("thinking"), kwargs.get("enable_thinking")
    return (thinking is None and enable is None) or bool(thinking) or bool(enable)
