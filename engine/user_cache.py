"""tokenwire's user cache directory: ``$TOKENWIRE_CACHE_DIR`` if set, else the platform's user
cache dir for tokenwire. The model assets live under it (``server/assets/cache.py``) and so do the
engine's built kernels (``engine/local/native.py``); torch-free, so both sides import it."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

CACHE_ENV = "TOKENWIRE_CACHE_DIR"


def cache_dir() -> Path:
    """``$TOKENWIRE_CACHE_DIR`` if set, else the platform's user cache dir for tokenwire."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return Path(platformdirs.user_cache_dir("tokenwire"))
