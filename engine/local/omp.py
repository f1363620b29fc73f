"""OpenMP's wait policy for the local engine (torch-free: it must run before torch loads).

torch's CPU operators run on OpenMP (libgomp), whose threads meet at a barrier after every
parallel region. Unless told otherwise libgomp makes a waiting thread spin (about 300,000 turns)
before it sleeps. On a machine whose cores are all busy that is the wrong choice: a waiting
thread spins on the core its sibling needs, and the sibling is descheduled. On the 2-core machine
of issue 22, at load average 5–8, a 2-thread engine made 1.4 / 4.2 tok/s at 1 / 8 streams with
libgomp's default and 34 / 220 tok/s with ``OMP_WAIT_POLICY=PASSIVE`` (docs/engine-design.md,
"Torch threads"). libgomp reads the policy once, when torch loads it, so :func:`prefer_passive_wait` runs
in the CLI before anything imports torch. With one torch thread (the default on a 2-CPU machine)
there is no barrier and the policy changes nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

POLICY_ENV = "OMP_WAIT_POLICY"
# Set by the user, either of these decides instead of tokenwire's default.
USER_KNOBS = (POLICY_ENV, "GOMP_SPINCOUNT")
DEFAULT_POLICY = "PASSIVE"


def prefer_passive_wait(environ: MutableMapping[str, str] | None = None, *,
                        torch_loaded: bool | None = None) -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless the environment sets ``OMP_WAIT_POLICY`` or
    ``GOMP_SPINCOUNT``, or torch is already loaded (too late to matter; ``torch_loaded``: None
    looks at ``sys.modules``). Returns whether it set it."""
    env = os.environ if environ is None else environ
    loaded = sys.modules.get("torch") is not None if torch_loaded is None else torch_loaded
    if loaded or any(env.get(k) for k in USER_KNOBS):
        return False
    env[POLICY_ENV] = DEFAULT_POLICY
    return True


def wait_policy(environ: MutableMapping[str, str] | None = None) -> str:
    """What the process runs with, for logs and ``/engine/stats``."""
    env = os.environ if environ is None else environ
    policy = env.get(POLICY_ENV)
    if policy:
        return policy.upper()
    if env.get("GOMP_SPINCOUNT"):
        return f"libgomp default, GOMP_SPINCOUNT={env['GOMP_SPINCOUNT']}"
    return "libgomp default (spin, then sleep)"
