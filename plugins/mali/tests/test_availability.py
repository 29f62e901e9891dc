"""Without an OpenCL platform nothing crashes: available() says why, kernels still generate
and run on the Kernel IR interpreter."""

from __future__ import annotations

import numpy as np
import pytest
import tilecraft_mali.availability as availability_module
from tilecraft_mali.runtime.device import DeviceInfo
from tilecraft_mali.target import MaliTarget

import tilecraft as tc
from tilecraft.ops import catalog
from tilecraft.target.base import Capability

NO_PLATFORM = DeviceInfo(False, "no OpenCL platform (test); pip install pocl-binary-distribution")


@pytest.fixture()
def no_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(availability_module, "find_device", lambda: NO_PLATFORM)
    availability_module.machine_availability.cache_clear()
    yield
    availability_module.machine_availability.cache_clear()


def test_no_platform_is_reported_not_raised(no_platform: None) -> None:
    availability = MaliTarget().available()
    assert (availability.codegen, availability.build, availability.execute) == (True, False, False)
    assert availability.capability is Capability.EMULATE
    assert "no OpenCL platform" in availability.reasons["build"]
    assert "Kernel IR interpreter" in availability.reasons["emulate"]
    assert "no OpenCL platform" in availability_module.describe_machine()["execute"]


def test_without_a_platform_kernels_run_on_the_interpreter(no_platform: None) -> None:
    graph, inputs = catalog.get("softmax[7x13]").build(np.random.default_rng(0))
    exe = tc.compile(graph, target=MaliTarget())
    assert all(source.language == "opencl" for source in exe.sources.values())
    np.testing.assert_allclose(exe(**inputs), tc.reference.run(graph, **inputs), rtol=1e-5)
