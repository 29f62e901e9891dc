"""A roofline estimate of a kernel on the Mali GPU of the spec (Mali-G76 MP10 figures).

``time = max(operations / peak(dtype), bytes / bandwidth)``, the larger term naming the bound:

- operations: every arithmetic operation the kernel's statements execute, all loop trips
  counted (bound loops too: one trip per work-item; both branches of a condition assumed
  taken), a fused multiply-add counting two; an ``arm_dot`` / ``arm_dot_acc`` call 8 (four
  int8 multiply-adds);
- peak: the spec's ``ComputeUnits.peak_flops`` for the kernel's arithmetic type — float32
  (10 cores x 3 engines x 8 lanes x 2 x 720 MHz = 345.6 GFLOP/s), float16 twice that, int8
  four times (1382 GOP/s) only where the kernel calls ``arm_dot`` — Bifrost has no other
  packed int8 arithmetic, so int8 without it runs at the int32 rate;
- bytes: the compulsory traffic with global memory (every parameter read or written once:
  an optimistic bound — a tiled kernel's re-reads from caches are not counted), over the
  bandwidth of the spec's ``global`` level (47.4 B/cycle x 720 MHz = 34.1 GB/s).

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Buffer, BufferLoad, For, Kernel, LoopKind, Store
>>> from tilecraft.te import Var, const
>>> from tilecraft_mali.target import load_target_spec
>>> x = Buffer("x", (1 << 20,), DType.FLOAT32)
>>> i = Var("i")
>>> scale = Kernel("scale", (x,), ("x",), For(i, const(1 << 20), LoopKind.SERIAL,
...     Store(x, (i,), BufferLoad(x, (i,)) * const(2.0))))
>>> estimate = estimate_kernel(scale, load_target_spec())
>>> estimate.bound, round(estimate.seconds * 1e6, 1)      # 4 MiB over 34.1 GB/s
('memory', 122.9)
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import (
    BufferLoad,
    For,
    IfThenElse,
    IntrinsicCall,
    Kernel,
    Stmt,
    Store,
    walk_expr,
)
from tilecraft.target.spec import TargetSpec
from tilecraft.te.expr import Binary, Const, Expr, Unary

__all__ = ["DOT_OPERATIONS", "MaliEstimate", "estimate_kernel"]

#: operations one arm_dot / arm_dot_acc call performs (4 multiplies + 4 adds)
DOT_OPERATIONS = 8


@dataclass(frozen=True)
class MaliEstimate:
    """The roofline terms of one kernel (module docstring)."""

    kernel: str
    operations: float
    dtype: str
    peak_ops_per_second: float
    bytes_moved: float
    bandwidth_bytes_per_second: float

    @property
    def compute_seconds(self) -> float:
        return self.operations / self.peak_ops_per_second

    @property
    def memory_seconds(self) -> float:
        return self.bytes_moved / self.bandwidth_bytes_per_second

    @property
    def seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_seconds >= self.memory_seconds else "memory"

    def detail(self) -> dict[str, float]:
        return {"operations": self.operations, "bytes": self.bytes_moved,
                "compute_seconds": self.compute_seconds, "memory_seconds": self.memory_seconds,
                "peak_ops_per_second": self.peak_ops_per_second,
                "bandwidth_bytes_per_second": self.bandwidth_bytes_per_second}

    def summary(self) -> str:
        """One line for the compile report."""
        return (f"model (Mali-G76 MP10 roofline): {self.seconds * 1e6:.2f} us, "
                f"{self.bound}-bound ({self.operations:.3g} {self.dtype} ops at "
                f"{self.peak_ops_per_second / 1e9:.1f} G/s, {self.bytes_moved:.3g} B at "
                f"{self.bandwidth_bytes_per_second / 1e9:.1f} GB/s)")


class _Counter:
    """Arithmetic operations per element type, and dot-product calls, over all trips."""

    def __init__(self) -> None:
        self.operations: dict[DType, float] = {}
        self.dot_calls = 0.0

    def add(self, dtype: DType, count: float) -> None:
        self.operations[dtype] = self.operations.get(dtype, 0.0) + count

    def visit(self, stmt: Stmt, trips: float) -> None:
        if isinstance(stmt, For):
            extent = stmt.extent
            inner = trips * (int(extent.value) if isinstance(extent, Const) else 1)
            self.visit(stmt.body, inner)
            return
        if isinstance(stmt, IntrinsicCall):
            if stmt.intrinsic in ("arm_dot", "arm_dot_acc"):
                self.dot_calls += trips
            return
        if isinstance(stmt, Store):
            arithmetic = _arithmetic(stmt.value)
            count = len(arithmetic) + (stmt.accumulate is not None)
            if count:
                dtype = arithmetic[0].dtype if arithmetic else stmt.buffer.dtype
                self.add(dtype, count * trips)
            return
        if isinstance(stmt, IfThenElse):
            self.visit(stmt.then_body, trips)
            if stmt.else_body is not None:
                self.visit(stmt.else_body, trips)
            return
        for child in _children(stmt):
            self.visit(child, trips)


def _arithmetic(value: Expr) -> list[Expr]:
    """The arithmetic nodes of a stored value, address computations (indices) left out."""
    addressing = {id(node) for load in walk_expr(value) if isinstance(load, BufferLoad)
                  for index in load.indices for node in walk_expr(index)}
    return [node for node in walk_expr(value)
            if isinstance(node, (Binary, Unary)) and id(node) not in addressing]


def _children(stmt: Stmt) -> list[Stmt]:
    children: list[Stmt] = []
    for name in type(stmt).child_fields:
        value = getattr(stmt, name)
        if isinstance(value, Stmt):
            children.append(value)
        elif isinstance(value, tuple):
            children.extend(item for item in value if isinstance(item, Stmt))
    return children


def estimate_kernel(kernel: Kernel, spec: TargetSpec) -> MaliEstimate:
    """The roofline estimate of ``kernel`` on ``spec``'s GPU (module docstring)."""
    counter = _Counter()
    counter.visit(kernel.body, 1.0)
    compute = spec.compute
    if counter.dot_calls:
        dtype = "int8"  # arm_dot: four int8 multiply-adds per lane and cycle
        operations = counter.dot_calls * DOT_OPERATIONS + sum(counter.operations.values())
        peak = compute.peak_flops(DType.INT8)
    else:
        dominant = max(counter.operations, key=lambda d: counter.operations[d],
                       default=DType.FLOAT32)
        operations = sum(counter.operations.values())
        rate_type = dominant if dominant in (DType.FLOAT16,) else (
            DType.FLOAT32 if dominant.is_float else DType.INT32)
        dtype, peak = dominant.value, compute.peak_flops(rate_type)
    level = spec.memory.levels[0]
    bandwidth = level.bandwidth_bytes_per_cycle * compute.frequency_hz
    moved = float(sum(buffer.nbytes for buffer in kernel.params))
    return MaliEstimate(kernel.name, operations, dtype, peak, moved, bandwidth)
