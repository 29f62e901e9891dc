"""The core's conformance suite, run for this target."""

from __future__ import annotations

import pytest

from tilecraft.testing.conformance import *  # noqa: F403


@pytest.fixture(scope="module")
def tilecraft_target_name() -> str:
    return "x86_avx512"
