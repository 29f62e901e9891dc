"""The core's conformance suite, run for this target: every operator of the standard set
generated as HLS C++, C-simulated with g++ and compared with the reference (no skips where g++
exists; one build per kernel text, cached on disk)."""

from __future__ import annotations

import pytest

from tilecraft.testing.conformance import *  # noqa: F403


@pytest.fixture(scope="module")
def tilecraft_target_name() -> str:
    return "fpga_hls"
