"""The state shared by the expression, memory and statement emitters of one kernel function.

It binds loop variables to SSA values, buffers to pointers, and — inside a vector loop — says
which variable runs across the lanes, where lane 0 is, and which lanes are active.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.nodes import Buffer
from tilecraft.te.expr import ReduceOp, Var
from tilecraft_x86_avx512.codegen.builder import FunctionBuilder, Value


@dataclass(frozen=True)
class CodegenOptions:
    """Knobs of the x86 code generator.

    ``fp_contract`` lets LLVM fuse ``a * b + c`` into one FMA (one rounding instead of two);
    vector reductions always reassociate (lane-wise partial sums combined at the end).
    UNROLLED loops with a constant extent up to ``unroll_limit`` become straight-line copies.
    Allocated buffers up to ``stack_limit_bytes`` live on the stack, larger ones are
    malloc'ed once per call, as are all buffers once a function's stack use would pass
    ``stack_budget_bytes``. ``default_lanes`` is used by VECTOR loops that give no lanes.
    Vector reductions keep ``reduction_interleave`` independent partial vectors.
    """

    fp_contract: bool = True
    unroll_limit: int = 64
    stack_limit_bytes: int = 256 * 1024
    stack_budget_bytes: int = 1024 * 1024
    reduction_interleave: int = 4
    default_lanes: int = 16
    max_lanes: int = 64


@dataclass(frozen=True)
class PartialSlot:
    """A stack slot holding the lane-wise partial results of one reduction store."""

    pointer: str
    elem: str
    lanes: int
    op: ReduceOp
    dtype: DType


@dataclass(frozen=True)
class VectorState:
    """The vector loop being emitted: ``var`` takes ``lane_index`` (= base + 0..lanes-1);
    ``mask`` is the active lanes (None: all); ``scalar_lane`` evaluates ``var`` as lane 0."""

    var: Var
    lanes: int
    base: Value
    lane_index: Value
    mask: Value | None = None
    partials: dict[int, PartialSlot] = field(default_factory=dict)
    scalar_lane: bool = False


class EmitContext:
    def __init__(self, fb: FunctionBuilder, options: CodegenOptions, kernel_name: str) -> None:
        self.fb = fb
        self.options = options
        self.kernel_name = kernel_name
        self.pointers: dict[Buffer, str] = {}
        self.env: dict[Var, Value] = {}
        self.vector: VectorState | None = None
        self.notes: list[str] = []
        self.cleanup: list[str] = []
        self.stack_bytes = 0

    def error(self, message: str) -> CodegenError:
        return CodegenError(f"x86_avx512, kernel {self.kernel_name!r}: {message}")

    @property
    def lanes(self) -> int:
        """Lanes of the vector loop being emitted (0 outside vector loops)."""
        return self.vector.lanes if self.vector is not None else 0

    @contextmanager
    def bind(self, var: Var, value: Value) -> Iterator[None]:
        previous = self.env.get(var)
        self.env[var] = value
        try:
            yield
        finally:
            if previous is None:
                del self.env[var]
            else:
                self.env[var] = previous

    @contextmanager
    def vector_scope(self, state: VectorState | None) -> Iterator[None]:
        previous, self.vector = self.vector, state
        try:
            yield
        finally:
            self.vector = previous

    @contextmanager
    def masked(self, mask: Value) -> Iterator[None]:
        """Emit with only the lanes of ``mask`` active (within the current mask)."""
        assert self.vector is not None
        with self.vector_scope(replace(self.vector, mask=mask)):
            yield

    @contextmanager
    def lane_zero(self) -> Iterator[None]:
        """Evaluate the vector variable as its lane-0 value (for contiguous addressing)."""
        if self.vector is None:
            yield
            return
        with self.vector_scope(replace(self.vector, scalar_lane=True)):
            yield

    @contextmanager
    def uniform(self) -> Iterator[None]:
        """Emit scalar code inside a vector loop (e.g. a reduction's final update)."""
        with self.vector_scope(None):
            yield
