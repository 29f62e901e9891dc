"""Helpers of the x86 template tests: the target with the template's parameters fixed, and a
compiled program checked against the reference interpreter.

>>> target = ForcedTarget({"MI": 4}, "y", threads=1)
>>> target.config, target.compute, target.threads
({'MI': 4}, 'y', 1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import te
from tilecraft.graph import Graph
from tilecraft.reference import run


class ForcedTarget(X86Avx512Target):
    """The x86 target with the template's parameters ``config`` fixed (what the tuner does) for
    compute ``name``, or for every compute when ``name`` is ``None``: small test shapes would
    otherwise fall back to the default loop nest."""

    def __init__(self, config: Mapping[str, Any], name: str | None = None,
                 threads: int = 2) -> None:
        super().__init__(threads=threads)
        self.config, self.compute = config, name

    def lower_compute(self, tensor, options, config=None):
        forced = self.compute is None or tensor.name == self.compute
        return super().lower_compute(tensor, options, self.config if forced else config)


def check_against_reference(outputs: Sequence[Any], threads: int, seed: int = 0,
                            target: X86Avx512Target | None = None) -> tc.Executable:
    """``outputs`` compiled for ``target`` (default: the x86 target on ``threads`` threads)
    and run on seeded standard-normal inputs, every output within 2e-4 of the reference's."""
    graph = Graph.from_outputs(list(outputs))
    exe = tc.compile(graph, target=target or X86Avx512Target(threads=threads))
    rng = np.random.default_rng(seed)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    got, want = exe(**arrays), run(graph, arrays)
    for g, w in zip(got if isinstance(got, tuple) else [got],
                    want if isinstance(want, tuple) else [want]):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)
    return exe


def check_space_switch(space: Any, y: Any, xs: np.ndarray, key: str,
                       path_kernels: Callable[[tc.Executable], list]) -> None:
    """Random points of the template search ``space`` of compute ``y`` (one input ``x``),
    decoded, until both values of the path switch ``key`` have been seen: each compiles with
    the path exactly when the switch is on (``path_kernels``: the executable's kernels of that
    path) and matches the reference on ``xs``."""
    rng = np.random.default_rng(1)
    seen = set()
    want = run(Graph.from_outputs([y]), {"x": xs})
    for _ in range(40):
        config = space.decode(space.space.random_point(rng))
        if config[key] in seen:
            continue
        seen.add(config[key])
        exe = tc.compile(y, target=ForcedTarget(config, "y", threads=2))
        assert bool(path_kernels(exe)) == bool(config[key])
        np.testing.assert_allclose(exe(xs), want, rtol=2e-4, atol=2e-4)
    assert seen == {0, 1}


def conv_epilogues(y: Any) -> tuple[Any, Any]:
    """Two consumers of the NCHW convolution ``y`` that a template fuses as its epilogue: the
    residual block's ``sum = y + bias[k] + res`` and ``relu6 = min(max(y + bias[k], 0), 6)``
    (``bias`` and ``res`` new inputs)."""
    _, channels, height, width = y.shape
    bias = te.placeholder((channels,), name="bias")
    res = te.placeholder((1, channels, height, width), name="res")
    total = te.compute(y.shape, lambda n, k, i, j: y[n, k, i, j] + bias[k] + res[n, k, i, j],
                       name="sum")
    relu6 = te.compute(y.shape, lambda n, k, i, j: te.min(te.max(y[n, k, i, j] + bias[k], 0.0),
                                                           6.0), name="relu6")
    return total, relu6
