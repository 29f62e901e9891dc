"""The records of the operator catalog: an input description and one operator case.

An :class:`OpCase` says which operator of :mod:`tilecraft.ops` to call, on which inputs and
with which keyword arguments; :meth:`OpCase.build` makes the graph and deterministic input
arrays. Its ``id`` describes it: ``conv2d[stride2-pad1-c3]``.

>>> case = OpCase("matmul", "m3-k5-n2", (InputSpec("A", (3, 5)), InputSpec("B", (5, 2))),
...               params={}, tags=frozenset({"compute-intensive"}), rtol=1e-4, atol=1e-5)
>>> graph, arrays = case.build()
>>> case.id, [t.name for t in graph.inputs], arrays["A"].dtype
('matmul[m3-k5-n2]', ['A', 'B'], dtype('float32'))
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilecraft.dtypes import DType, as_dtype
from tilecraft.graph import Graph
from tilecraft.te.tensor import Tensor, placeholder

#: name of the final output tensor of every catalog graph (intermediates are ``out_<step>``)
OUTPUT_NAME = "out"


@dataclass(frozen=True)
class InputSpec:
    """One input of a case: a placeholder's name, shape and dtype, and the range its random
    values are drawn from (uniform for floats, inclusive integers for integer types)."""

    name: str
    shape: tuple[int, ...]
    dtype: DType = DType.FLOAT32
    low: float = -1.0
    high: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", as_dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(self.shape))

    def placeholder(self) -> Tensor:
        return placeholder(self.shape, self.dtype, name=self.name)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """Random values of this input's shape and storage dtype."""
        if self.dtype.is_int:
            values = rng.integers(int(self.low), int(self.high), size=self.shape, endpoint=True)
            return values.astype(self.dtype.numpy)
        values = rng.uniform(self.low, self.high, size=self.shape).astype(np.float32)
        return values.astype(self.dtype.numpy)


@dataclass(frozen=True, eq=False)
class OpCase:
    """One operator on one input configuration.

    ``name`` is the operator's function name in :mod:`tilecraft.ops`; ``params`` are its
    keyword arguments besides the input tensors; ``pack_inputs`` passes the placeholders as
    one list (``concat``). ``rtol``/``atol`` are the tolerances a compiled result must meet
    against the reference interpreter.
    """

    name: str
    variant: str
    inputs: tuple[InputSpec, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    tags: frozenset[str] = frozenset()
    rtol: float = 1e-5
    atol: float = 1e-6
    pack_inputs: bool = False

    @property
    def id(self) -> str:
        return f"{self.name}[{self.variant}]"

    @property
    def operator(self) -> Callable[..., Tensor]:
        from tilecraft import ops

        return getattr(ops, self.name)

    @property
    def builder(self) -> Callable[[np.random.Generator | None], tuple[Graph, dict[str, Any]]]:
        """``builder(rng) -> (graph, arrays)``; the same as :meth:`build`."""
        return self.build

    def seed(self) -> int:
        """The default random seed of this case (stable across runs and machines)."""
        return zlib.crc32(self.id.encode())

    def output(self) -> Tensor:
        """Build fresh placeholders and the operator's output tensor."""
        tensors = [spec.placeholder() for spec in self.inputs]
        args: list[Any] = [tensors] if self.pack_inputs else tensors
        return self.operator(*args, **self.params, name=OUTPUT_NAME)

    def arrays(self, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        rng = rng if rng is not None else np.random.default_rng(self.seed())
        return {spec.name: spec.sample(rng) for spec in self.inputs}

    def build(self, rng: np.random.Generator | None = None
              ) -> tuple[Graph, dict[str, np.ndarray]]:
        """The case's graph and its input arrays (drawn from ``rng``, or the case's seed)."""
        return Graph.from_outputs([self.output()]), self.arrays(rng)

    def __repr__(self) -> str:
        return f"OpCase({self.id})"
