"""Fixtures shared by several end-to-end modules."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.deploy_support import Topology


@pytest.fixture(scope="session")
def reference_topology(asset: Callable[[str], Path]) -> Iterator[Topology]:
    """The reference deployment (tests/e2e/deploy_support.py, ``ws://`` engine wire, tiny-qwen3) that
    test_deploy_browser.py and test_deploy_scaleout.py both kill and drain parts of: started once for
    both (a topology is six processes). Every test that stops a part starts it again before it ends,
    as it did with a topology of its own; a module that must measure fresh processes
    (test_deploy_sizing.py) or needs other flags starts its own."""
    with Topology(asset("tiny-qwen3"), wire="ws") as t:
        yield t
