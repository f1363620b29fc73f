"""Finding markers in streamed text, and holding back what may still become one.

A marker (``<tool_call>``, ``</think>``, ``[TOOL_CALLS]``…) can arrive split across deltas: ``<tool_c``
now, ``all>`` later. A parser that emits text must therefore hold back the longest suffix of what
it has that is a proper prefix of a marker it is looking for, and decide once more text arrives
(or at the end of the stream, when the held text is just text).
"""

from __future__ import annotations

from collections.abc import Iterable


def held_suffix_len(text: str, markers: Iterable[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``.

    Cost is O(total marker length), independent of ``len(text)``.
    """
    best = 0
    for marker in markers:
        # Only a suffix that starts with the marker's first character can be a prefix of it.
        first = marker[0]
        start = max(len(text) - len(marker) + 1, 0)
        pos = text.find(first, start)
        while pos != -1:
            k = len(text) - pos
            if k <= best:
                break
            if marker.startswith(text[pos:]):
                best = k
                break
            pos = text.find(first, pos + 1)
    return best


def find_first(text: str, markers: Iterable[str], start: int = 0) -> tuple[int, str]:
    """Position and text of the earliest marker in ``text[start:]``; ``(-1, "")`` when none.

    When two markers start at the same position the longer one wins.
    """
    best_pos, best = -1, ""
    for marker in markers:
        pos = text.find(marker, start)
        if pos != -1 and (best_pos == -1 or pos < best_pos or (pos == best_pos and len(marker) > len(best))):
            best_pos, best = pos, marker
    return best_pos, best


def split_safe(text: str, markers: Iterable[str]) -> tuple[str, str]:
    """Split ``text`` (known to hold no complete marker) into what is safe to emit and what to hold."""
    k = held_suffix_len(text, markers)
    if k == 0:
        return text, ""
    return text[:-k], text[-k:]
