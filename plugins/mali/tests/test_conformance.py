"""The core's conformance suite, run for this target (checks that need code generation skip
with the reason available() gives)."""

from __future__ import annotations

import pytest

from tilecraft.testing.conformance import *  # noqa: F403


@pytest.fixture(scope="module")
def tilecraft_target_name() -> str:
    return "mali"
