"""The compiled program: numpy arrays in, numpy arrays out, plus a report.

An Executable holds one compiled kernel per compute of the graph and runs them in topological
order, allocating intermediate tensors between them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilecraft.errors import TargetError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.runtime.inputs import bind_inputs
from tilecraft.runtime.report import Report
from tilecraft.target.base import Source

KernelRunner = Callable[[Mapping[str, np.ndarray]], None]


@dataclass
class CompiledKernel:
    """A kernel, its generated source, and how to run it here (``None`` when this machine can
    only compile for the target)."""

    kernel: Kernel
    source: Source
    runner: KernelRunner | None


class Executable:
    """Call with arrays for the graph's inputs (by name, or positionally in ``graph.inputs``
    order); returns the output array, or a tuple for several outputs."""

    def __init__(self, graph: Graph, target_name: str, compiled: Sequence[CompiledKernel],
                 report: Report, unavailable_reason: str | None = None):
        self.graph = graph
        self.target_name = target_name
        self.compiled = list(compiled)
        self.report = report
        self._unavailable_reason = unavailable_reason
        self._outputs_by_name = {t.name: t for t in graph.computes}
        self._workspaces: dict[str, np.ndarray] = {}

    @property
    def sources(self) -> dict[str, Source]:
        """Generated source per kernel name."""
        return {c.kernel.name: c.source for c in self.compiled}

    @property
    def kernels(self) -> list[Kernel]:
        return [c.kernel for c in self.compiled]

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.graph.inputs]

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        if self._unavailable_reason is not None:
            raise TargetError(f"this executable was compiled for {self.target_name}, which this "
                              f"machine cannot run: {self._unavailable_reason}; its sources are "
                              "in exe.sources")
        values: dict[str, np.ndarray] = bind_inputs(self.graph.inputs, args, kwargs)
        for entry, report in zip(self.compiled, self.report.kernels):
            for out_name in entry.kernel.outputs:
                if out_name in values:
                    continue
                tensor = self._outputs_by_name.get(out_name)
                if tensor is not None:
                    values[out_name] = np.empty(tensor.shape, dtype=tensor.dtype.numpy)
                else:  # a workspace of the target's template (e.g. a packed operand),
                    # kept between calls: fresh pages would fault on every call
                    buffer = next(p for p in entry.kernel.params if p.name == out_name)
                    workspace = self._workspaces.get(out_name)
                    if workspace is None:
                        workspace = np.empty(buffer.shape, dtype=buffer.dtype.numpy)
                        self._workspaces[out_name] = workspace
                    values[out_name] = workspace
            arrays = {p.name: _as_param(values[p.name], p.shape) for p in entry.kernel.params}
            assert entry.runner is not None
            start = time.perf_counter()
            entry.runner(arrays)
            report.run_seconds.append(time.perf_counter() - start)
            if len(report.run_seconds) > 1000:
                del report.run_seconds[:-100]
        outputs = tuple(values[t.name] for t in self.graph.outputs)
        return outputs[0] if len(outputs) == 1 else outputs

    def benchmark(self, *args: Any, repeat: int = 20, warmup: int = 2,
                  **kwargs: Any) -> float:
        """Median wall time of a whole call in seconds (after ``warmup`` calls)."""
        for _ in range(warmup):
            self(*args, **kwargs)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            self(*args, **kwargs)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    def __repr__(self) -> str:
        return (f"Executable(target={self.target_name!r}, kernels="
                f"{[c.kernel.name for c in self.compiled]})")


def _as_param(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` viewed in a kernel parameter's shape: a template may view a tensor as, e.g.,
    ``[batch, M, N]``; the view shares memory (arrays here are C-contiguous)."""
    if array.shape == tuple(shape):
        return array
    return array.reshape(shape)
