"""The gating matrix shared by the unit test and the real-process test: (mode, setting) → outcome."""

from __future__ import annotations

from server.gating import ENV_ALIAS, ENV_VAR
from server.settings import Mode

# (name, environment, --enable-scale-out)
SETTINGS: list[tuple[str, dict[str, str], bool]] = [
    ("unset", {}, False),
    ("zero", {ENV_VAR: "0"}, False),
    ("one", {ENV_VAR: "1"}, False),
    ("invalid", {ENV_VAR: "yes"}, False),
    ("alias", {ENV_ALIAS: "1"}, False),
    ("alias-zero", {ENV_ALIAS: "0"}, False),
    ("conflicting-alias", {ENV_VAR: "1", ENV_ALIAS: "0"}, False),
    ("agreeing-alias", {ENV_VAR: "1", ENV_ALIAS: "1"}, False),
    ("flag", {}, True),
    ("flag-and-zero", {ENV_VAR: "0"}, True),
]


def expected(mode: Mode, name: str) -> str | tuple[bool, bool]:
    """An error-message fragment, or (scale-out endpoints exposed, INFO hint logged)."""
    if name == "invalid":
        return "is invalid; use 0 or 1"
    if name == "conflicting-alias":
        return "disagree"
    if name == "flag-and-zero":
        return "conflicts with --enable-scale-out"
    if name in ("zero", "alias-zero"):
        return f"conflicts with `{mode.command}`" if mode is not Mode.SERVE else (False, True)
    if mode is Mode.SERVE:
        return (name != "unset", name == "unset")
    return (True, False)
