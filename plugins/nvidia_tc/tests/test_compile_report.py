"""The compile report carries each kernel's build: registers, shared memory, spills and
occupancy for every architecture of the spec, also where the kernel only emulates."""

import pytest
from tilecraft_nvidia_tc.target import NvidiaTcTarget

import tilecraft as tc
from tilecraft import ops, te


def test_every_kernel_reports_its_resources_per_architecture():
    target = NvidiaTcTarget()
    if not target.available().build:
        pytest.skip(f"no CUDA build here: {target.available().reasons.get('build')}")
    x = te.placeholder((7, 13), name="x")
    graph = tc.Graph.from_outputs([ops.softmax(ops.relu(x, name="r"), name="s")])
    exe = tc.compile(graph, target=target)
    assert exe.report.kernels
    for kernel in exe.report.kernels:
        assert kernel.mode == "emulated" or kernel.mode == "native"
        for arch in ("sm_80", "sm_90"):
            line = next(line for line in kernel.build_summary.splitlines() if arch in line)
            assert "registers" in line and "occupancy" in line, line
    text = str(exe.report)
    assert text.count("    build: ") == 2 * len(exe.report.kernels)
