"""The nvidia_tc target generates CUDA C through its code generator: ``tc.compile`` gives
one CUDA source per kernel and ``available()`` reports code generation."""

from __future__ import annotations

from tilecraft_nvidia_tc.target import NvidiaTcTarget

import tilecraft as tc
from tilecraft.ops import catalog


def test_compile_gives_cuda_sources_for_every_kernel() -> None:
    graph, _ = catalog.get("softmax[7x13]").build()
    exe = tc.compile(graph, target="nvidia_tc")
    # one CUDA source per kernel: one kernel per compute the graph passes leave (the
    # subtraction is folded into the exponent by inline_elementwise)
    assert sorted(exe.sources) == sorted(t.name for t in exe.graph.computes)
    assert len(exe.sources) == 4
    for source in exe.sources.values():
        assert source.language == "cuda" and "__global__" in source.text
    assert NvidiaTcTarget().available().codegen
