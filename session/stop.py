"""Stop strings, applied at derender (a token-only engine never sees text).

:class:`StopStrings` watches the detokenized text of one choice. The stream is cut at the first
stop string to complete (the match that ends first; on a tie, the longest), as an engine checking
after every token would cut it, so the result does not depend on how the text was split. The
string itself is kept only with ``include_stop_str_in_output``. While streaming, the last ``max(len(stop)) - 1``
characters are held back, so a partial stop string is never emitted: they are either released by
later text that rules the match out, cut by a match, or flushed at the end of the stream.

The continuation state is the held-back tail only (at most ``max(len(stop)) - 1`` characters).
Each call looks at the tail plus the new text, so its cost is O(new text + longest stop string).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopStrings"]


class StopStrings:
    __slots__ = ("_hold", "_stops", "include", "matched", "tail")

    def __init__(self, stops: Sequence[str], *, include_in_output: bool = False, tail: str = "") -> None:
        self._stops = tuple(s for s in dict.fromkeys(stops) if s)
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self.include = include_in_output
        self.tail = tail
        self.matched: str | None = None

    @property
    def active(self) -> bool:
        return bool(self._stops)

    @property
    def hold(self) -> int:
        """How many characters may be held back (the state's size bound)."""
        return self._hold

    def feed(self, text: str) -> str:
        """The text that is safe to emit after ``text``. When a stop string completes, returns
        the text before it (plus the string with ``include_in_output``) and sets ``matched``;
        feed nothing after that."""
        if self.matched is not None:
            return ""
        buf = self.tail + text
        if not buf:
            return ""
        best_pos = -1
        best_end = 0
        best = ""
        for stop in self._stops:
            pos = buf.find(stop)
            if pos == -1:
                continue
            end = pos + len(stop)
            if best_pos == -1 or end < best_end or (end == best_end and pos < best_pos):
                best_pos, best_end, best = pos, end, stop
        if best_pos != -1:
            self.matched = best
            self.tail = ""
            return buf[: best_pos + len(best)] if self.include else buf[:best_pos]
        if self._hold == 0:
            self.tail = ""
            return buf
        cut = len(buf) - self._hold
        if cut <= 0:
            self.tail = buf
            return ""
        self.tail = buf[cut:]
        return buf[:cut]

    def flush(self) -> str:
        """At the end of the stream: the held-back text (no stop string was found)."""
        out, self.tail = self.tail, ""
        return out
