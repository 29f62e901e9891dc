"""Kernel IR: the one imperative loop-nest IR every code generator consumes.

It is designed against the five kinds of chip tilecraft's target plugins describe (a CPU, a
GPU with tensor cores, a mobile GPU, an NPU, an FPGA; thesis §1.1.2, §2.4):

- loops carry a kind: serial, parallel (across cores, chunked), vector (N lanes; the code
  generator handles a remainder when the extent is not a multiple of the lanes), unrolled,
  bound (to a hardware axis such as ``blockIdx.x`` or a work-item id), pipelined (with an
  initiation interval), stage (a dataflow stage of an HLS region);
- buffers are placed in a memory level named in the target spec (``global``, ``L1``,
  ``shared``, ``fragment``, ``L0A``, ``BRAM`` ...), with a shape, an element type (a dtype, or
  a vector of ``lanes`` of it: ``float16x8``), a layout (:mod:`.layout`) and an optional array
  partitioning;
- statements: stores (optionally accumulating with a reduce op), copies of regions between
  levels, intrinsic calls on operand regions (base and strides, as AMOS's memory mapping),
  micro-kernel calls, barriers, stream pushes and pops, conditionals, allocations; and the
  statements of concurrent hardware in :mod:`.concurrency` (asynchronous copies with commit /
  wait groups, multi-stage pipelines, dataflow regions, atomics, subgroup reductions).

Every statement class lists its child statements (``child_fields``) and expressions
(``expr_fields``) so one visitor (:mod:`.visitor`) walks and rebuilds them all.

Expressions are te expressions over loop variables (:class:`tilecraft.te.Var`) plus
:class:`BufferLoad`. Everything is frozen and hashable.

>>> from tilecraft.te import Var, const
>>> A = Buffer("A", (4,), DType.FLOAT32, level="global")
>>> i = Var("i")
>>> loop = For(i, const(4), LoopKind.SERIAL, Store(A, (i,), const(0.0)))
>>> print(loop)
for i in serial(4):
  A[i] = 0.0
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tilecraft.dtypes import DType
from tilecraft.te.expr import Expr, ReduceOp, Var


class LoopKind(str, enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTOR = "vector"
    UNROLLED = "unrolled"
    BOUND = "bound"
    PIPELINED = "pipelined"
    STAGE = "stage"


class PartitionKind(str, enum.Enum):
    CYCLIC = "cyclic"
    BLOCK = "block"
    COMPLETE = "complete"


@dataclass(frozen=True)
class ArrayPartition:
    """HLS-style partitioning of one buffer dimension into ``factor`` banks."""

    dim: int
    kind: PartitionKind
    factor: int = 1


@dataclass(frozen=True, eq=False)
class Buffer:
    """A named array in a memory level; compared and hashed by identity.

    ``layout`` names how the logical shape is laid out in memory (``row_major`` unless a
    target's lowering chose e.g. ``fractal_zZ`` for Ascend's 16x16 blocks; see
    :func:`~tilecraft.kernel_ir.layout.parse_layout`; a Layout object is stored by its name).
    ``lanes`` > 1 makes every element a vector of ``lanes`` values of ``dtype`` (OpenCL's
    ``char4``, CUDA's ``half2``): a load of one element is a vector value.

    >>> Buffer("V", (4,), DType.INT8, lanes=4).element_type
    'int8x4'
    """

    name: str
    shape: tuple[int, ...]
    dtype: DType
    level: str = "global"
    layout: str = "row_major"
    partitions: tuple[ArrayPartition, ...] = ()
    lanes: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.layout, str):
            object.__setattr__(self, "layout", self.layout.name)

    @property
    def element_type(self) -> str:
        """``float32``, or ``float16x8`` for a vector element type."""
        return self.dtype.value if self.lanes == 1 else f"{self.dtype.value}x{self.lanes}"

    @property
    def storage_shape(self) -> tuple[int, ...]:
        """The numpy shape holding the buffer: the shape, plus the lanes of a vector type."""
        return self.shape if self.lanes == 1 else (*self.shape, self.lanes)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        total = 1
        for extent in self.shape:
            total *= extent
        return total

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer (all lanes of a vector element type)."""
        return self.size * self.dtype.bytes * self.lanes

    def strides(self) -> tuple[int, ...]:
        """Row-major element strides of the logical shape."""
        strides, step = [], 1
        for extent in reversed(self.shape):
            strides.append(step)
            step *= extent
        return tuple(reversed(strides))

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {list(self.shape)}, {self.element_type}, {self.level})"


@dataclass(frozen=True, eq=True)
class BufferLoad(Expr):
    """Read one element of a buffer (or ``lanes`` consecutive elements when vectorised by a
    code generator; the IR itself is scalar)."""

    buffer: Buffer
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype

    def ir_children(self) -> tuple[Expr, ...]:
        return self.indices

    def ir_rebuild(self, new_children: tuple[Expr, ...]) -> BufferLoad:
        return BufferLoad(self.buffer, new_children)

    def render_text(self, render: Any) -> str:
        return f"{self.buffer.name}[{', '.join(render(i) for i in self.indices)}]"


@dataclass(frozen=True)
class Region:
    """A strided block of a buffer: element ``(t0, t1, ...)`` of the region is
    ``buffer[base[d] + t_d * steps[d] for each d]`` for ``0 <= t_d < extents[d]``.

    This is the operand form of AMOS's memory abstraction (thesis Def. 4): a base address and
    strides per operand. ``steps`` default to 1.
    """

    buffer: Buffer
    base: tuple[Expr, ...]
    extents: tuple[int, ...]
    steps: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.steps:
            object.__setattr__(self, "steps", (1,) * len(self.extents))


class Stmt:
    """Base of every Kernel IR statement.

    ``child_fields`` name the fields holding statements (a statement, a tuple of them, or
    None), ``expr_fields`` those holding expressions (an expression or a tuple of them); the
    :class:`~tilecraft.kernel_ir.visitor.KernelTransformer` rebuilds through them.
    """

    __slots__ = ()
    child_fields: ClassVar[tuple[str, ...]] = ()
    expr_fields: ClassVar[tuple[str, ...]] = ()

    def __str__(self) -> str:
        from tilecraft.kernel_ir.printer import stmt_to_str

        return stmt_to_str(self)


@dataclass(frozen=True)
class For(Stmt):
    """``for var in kind(extent): body`` with ``var`` running from 0 to ``extent - 1``.

    ``lanes`` is the vector width of a ``VECTOR`` loop (or unroll factor of ``UNROLLED``),
    ``axis`` the hardware axis of a ``BOUND`` loop, ``initiation_interval`` the II of a
    ``PIPELINED`` loop.
    """

    child_fields: ClassVar[tuple[str, ...]] = ("body",)
    expr_fields: ClassVar[tuple[str, ...]] = ("extent",)

    var: Var
    extent: Expr
    kind: LoopKind
    body: Stmt
    lanes: int = 0
    axis: str | None = None
    initiation_interval: int | None = None


@dataclass(frozen=True)
class Seq(Stmt):
    child_fields: ClassVar[tuple[str, ...]] = ("stmts",)

    stmts: tuple[Stmt, ...]


@dataclass(frozen=True)
class Store(Stmt):
    """``buffer[indices] = value``, or ``buffer[indices] = accumulate(buffer[indices], value)``."""

    expr_fields: ClassVar[tuple[str, ...]] = ("indices", "value")

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr
    accumulate: ReduceOp | None = None


@dataclass(frozen=True)
class Allocate(Stmt):
    """Declare ``buffer`` in its memory level for the extent of ``body``.

    ``zeroed``: the buffer starts at zero. ``False`` where the lowering writes every element
    before reading it (a packed panel, a local tile): a code generator may then skip the fill
    (the x86 one's memset of a 512 KiB packed block cost 8% of a 1x1 convolution), and the
    interpreters start the buffer at NaN (the dtype's largest value for integers), so a read
    before a write shows in the result instead of passing for a zero.

    >>> Allocate(Buffer("t", (4,), DType.FLOAT32), Seq(()), zeroed=False).zeroed
    False
    """

    child_fields: ClassVar[tuple[str, ...]] = ("body",)

    buffer: Buffer
    body: Stmt
    zeroed: bool = True


@dataclass(frozen=True)
class IfThenElse(Stmt):
    child_fields: ClassVar[tuple[str, ...]] = ("then_body", "else_body")
    expr_fields: ClassVar[tuple[str, ...]] = ("cond",)

    cond: Expr
    then_body: Stmt
    else_body: Stmt | None = None


@dataclass(frozen=True)
class Copy(Stmt):
    """Copy a region to a region of the same extents (a move between memory levels)."""

    expr_fields: ClassVar[tuple[str, ...]] = ("dst", "src")

    dst: Region
    src: Region


@dataclass(frozen=True)
class IntrinsicCall(Stmt):
    """Invoke a hardware intrinsic declared in the target spec on operand regions."""

    expr_fields: ClassVar[tuple[str, ...]] = ("operands",)

    intrinsic: str
    operands: tuple[Region, ...]
    attrs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class MicroKernelCall(Stmt):
    """Invoke a registered micro-kernel implementation on operand regions."""

    expr_fields: ClassVar[tuple[str, ...]] = ("operands",)

    micro_kernel: str
    operands: tuple[Region, ...]
    params: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Barrier(Stmt):
    """Synchronise the threads of ``scope`` (``block``, ``warp``, ``work_group``, ``pipe``)."""

    scope: str = "block"


@dataclass(frozen=True, eq=False)
class Stream:
    """A FIFO between dataflow stages (HLS)."""

    name: str
    dtype: DType
    depth: int = 2


@dataclass(frozen=True)
class StreamPush(Stmt):
    expr_fields: ClassVar[tuple[str, ...]] = ("value",)

    stream: Stream
    value: Expr


@dataclass(frozen=True)
class StreamPop(Stmt):
    """Pop one element of ``stream`` into ``buffer[indices]``."""

    expr_fields: ClassVar[tuple[str, ...]] = ("indices",)

    stream: Stream
    buffer: Buffer
    indices: tuple[Expr, ...]


@dataclass(frozen=True)
class LaunchConfig:
    """Grid and block extents for targets that launch kernels (CUDA, OpenCL)."""

    grid: tuple[int, ...] = (1,)
    block: tuple[int, ...] = (1,)
    shared_bytes: int = 0


@dataclass(frozen=True)
class Kernel:
    """One kernel: parameters (buffers in the outermost level, named after graph tensors),
    the output parameter names, and a body.

    ``attrs`` records how it was made (the schedule, the source compute) for reports;
    ``attrs["flops"]``, where present, is the floating-point operations the kernel does when
    they are not its compute's (a Winograd convolution's products and transforms), which the
    report's roofline uses.
    """

    name: str
    params: tuple[Buffer, ...]
    outputs: tuple[str, ...]
    body: Stmt
    launch: LaunchConfig | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def param(self, name: str) -> Buffer:
        for buffer in self.params:
            if buffer.name == name:
                return buffer
        raise KeyError(name)

    def __str__(self) -> str:
        from tilecraft.kernel_ir.printer import kernel_to_str

        return kernel_to_str(self)


def expr_children(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of a Kernel IR expression (te nodes and BufferLoad)."""
    from tilecraft.te.visit import children

    return children(expr)


def walk_expr(expr: Expr) -> list[Expr]:
    """Every node of a Kernel IR expression, parents before children, BufferLoad indices
    included.

    >>> from tilecraft.te import Var
    >>> A = Buffer("A", (4,), DType.FLOAT32)
    >>> i = Var("i")
    >>> [type(n).__name__ for n in walk_expr(BufferLoad(A, (i + 1,)) * 2.0)]
    ['Binary', 'BufferLoad', 'Binary', 'Var', 'Const', 'Const']
    """
    nodes, stack = [], [expr]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(reversed(expr_children(node)))
    return nodes
