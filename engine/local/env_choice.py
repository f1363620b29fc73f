"""The local engine's settings that name one of a few kernels or modes (torch-free): one reading,
one warning, for every such environment variable."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("tokenwire.engine")


def env_choice(name: str, choices: tuple[str, ...]) -> str:
    """The environment variable ``name`` as one of ``choices`` (two or more; case and surrounding
    spaces ignored), the first of them when unset; any other value is named in a warning and
    ignored."""
    value = os.environ.get(name, "").strip().lower()
    if value and value not in choices:
        allowed = ", ".join(map(repr, choices[:-1])) + " or " + repr(choices[-1])
        log.warning("ignoring %s=%r (use %s)", name, value, allowed)
    return value if value in choices else choices[0]
