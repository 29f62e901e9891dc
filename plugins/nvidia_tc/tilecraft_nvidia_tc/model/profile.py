"""What a Kernel IR kernel asks of the GPU, counted once from the IR: the model's input
(:class:`KernelProfile`), independent of the chip it runs on.

One walk over the kernel counts, over all loop trips (bound loops too; a guard counts the
fraction of the sampled iterations where it holds, :func:`.evaluate.guard_fraction`):

- ``blocks`` (trips of loops bound to grid axes) and ``threads_per_block`` (block axes);
- arithmetic instructions per thread by type: every arithmetic node of a stored value (the
  address arithmetic of indices left out, casts free: the compiler hoists them out of a
  register tile's product), a multiply feeding an add or a ``sum=`` accumulation fused into
  one FMA; ``flops`` counts an FMA as two;
- Tensor Core work: every call of an intrinsic of the spec with a compute (WMMA, mma.sync) is
  one warp's issue of ``M x N x K`` multiply-adds — inside loops bound to threads the calls
  of a warp's 32 lanes count once;
- warp-collective fragments: a fragment-level buffer an intrinsic call of the spec takes as
  an operand is spread over the 32 lanes of a warp (``load_matrix_sync`` and
  ``store_matrix_sync`` are warp-wide): a ``Copy`` to or from it counts once per warp,
  moving the whole tile (conflict-free shared wavefronts of 128 bytes, as ``ldmatrix``; or
  L2 sectors from global memory; an mma.sync operand's per-lane gather by the wavefronts of
  its warp-wide accesses, bank conflicts included), and it holds
  ``elements x bytes / 4 / 32`` registers of each thread;
- memory traffic per warp-wide access (:mod:`.access`): global loads, stores and copies in
  32-byte sectors (what goes through the L2), shared ones in wavefronts (bank conflicts
  included); the fragment level (registers) is free; ``dram_bytes`` is the compulsory traffic
  (each parameter once: the L2 is assumed to catch re-reads between blocks);
- ``global_rounds``: the dependent global round trips a block waits for — the trips of the
  serial loops around its slowest global read (a warp stalls at each use of a load), a
  software pipeline of depth ``d`` dividing its trips by ``d - 1`` (its copies are in flight
  that many steps ahead; an asynchronous copy is waited for once per pipeline step, whatever
  loops of its stage issue it);
- the resources a block holds: shared memory (its allocations, or the launch's) and an
  estimate of registers per thread (the fragment allocations' 32-bit words plus
  :data:`REGISTER_OVERHEAD`), used where no build reports the real ones.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Buffer, BufferLoad, For, Kernel, LoopKind, Store
>>> from tilecraft.te import Var, const
>>> x, y = Buffer("x", (1 << 20,), DType.FLOAT32), Buffer("y", (1 << 20,), DType.FLOAT32)
>>> b, t = Var("b"), Var("t")
>>> body = Store(y, (b * 256 + t,), BufferLoad(x, (b * 256 + t,)) * const(2.0))
>>> k = Kernel("scale", (x, y), ("y",), For(b, const(4096), LoopKind.BOUND,
...     For(t, const(256), LoopKind.BOUND, body, axis="threadIdx.x"), axis="blockIdx.x"))
>>> p = profile_kernel(k, grid_axes={"blockIdx.x"})
>>> p.blocks, p.threads_per_block, p.flops, p.l2_bytes == 8 * (1 << 20)
(4096, 256, 1048576.0, True)
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from tilecraft.kernel_ir.concurrency import (
    AsyncCopy,
    AtomicUpdate,
    Pipeline,
    SubgroupReduce,
)
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    Copy,
    For,
    IfThenElse,
    IntrinsicCall,
    Kernel,
    LoopKind,
    Region,
    Stmt,
    Store,
    walk_expr,
)
from tilecraft.target.intrinsic import IntrinsicDecl
from tilecraft.te.expr import Binary, BinaryOp, Cast, Const, Expr, Not, ReduceOp, Select, Unary, Var
from tilecraft_nvidia_tc.model.access import BANKS, SECTOR_BYTES, WORD_BYTES, warp_access
from tilecraft_nvidia_tc.model.evaluate import (
    NotEvaluable,
    evaluate,
    guard_fraction,
    lane_grid,
)

__all__ = ["REGISTER_OVERHEAD", "KernelProfile", "profile_kernel"]

#: 32-bit registers a thread uses besides its fragment buffers (addresses, loop counters);
#: the same figure as the GPU contraction template's tile model
REGISTER_OVERHEAD = 48
#: the most elements of one copy region a lane's addresses are enumerated for
_MAX_REGION_ELEMENTS = 64
_FUSABLE = (BinaryOp.ADD, BinaryOp.SUB)


@dataclass(frozen=True)
class KernelProfile:
    """The counts of one kernel (module docstring); totals over the whole launch."""

    kernel: str
    blocks: int
    threads_per_block: int
    instructions: Mapping[str, float] = field(default_factory=dict)
    flops: float = 0.0
    tensor_issues: Mapping[str, float] = field(default_factory=dict)
    tensor_macs: float = 0.0
    shared_wavefronts: float = 0.0
    shared_bytes_moved: float = 0.0
    l2_bytes: float = 0.0
    global_bytes_requested: float = 0.0
    dram_bytes: float = 0.0
    global_rounds: float = 0.0
    shared_bytes_per_block: int = 0
    registers_per_thread: int = REGISTER_OVERHEAD
    #: warps of a block issuing Tensor Core instructions (0: all of its warps)
    tensor_warps_per_block: int = 0

    @property
    def tensor_warps(self) -> int:
        """Warps of a block issuing Tensor Core instructions."""
        return self.tensor_warps_per_block or max(1, -(-self.threads_per_block // 32))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (it travels in a Source's ``meta``)."""
        data = asdict(self)
        data["instructions"] = dict(self.instructions)
        data["tensor_issues"] = dict(self.tensor_issues)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KernelProfile:
        return cls(**dict(data))

    @property
    def uses_tensor_cores(self) -> bool:
        return self.tensor_macs > 0


def _extent(expr: Expr) -> int:
    if isinstance(expr, Const):
        return int(expr.value)
    try:
        return max(0, int(evaluate(expr, {})))
    except NotEvaluable:
        return 1


def _strip_casts(expr: Expr) -> Expr:
    while isinstance(expr, Cast):
        expr = expr.x
    return expr


def _arithmetic(value: Expr) -> list[Expr]:
    """The arithmetic nodes of a stored value, the address computations of loads left out."""
    addressing = {id(node) for load in walk_expr(value) if isinstance(load, BufferLoad)
                  for index in load.indices for node in walk_expr(index)}
    return [node for node in walk_expr(value) if id(node) not in addressing
            and isinstance(node, (Binary, Unary, Select, Not))]


def _instructions(value: Expr, accumulate: ReduceOp | None) -> tuple[int, int]:
    """(instructions, operations) of one stored value: FMA fused, counted once / twice."""
    nodes = _arithmetic(value)
    operations = len(nodes) + (accumulate is not None)
    fused = sum(1 for node in nodes if isinstance(node, Binary) and node.op in _FUSABLE
                and any(isinstance(_strip_casts(side), Binary)
                        and _strip_casts(side).op is BinaryOp.MUL for side in (node.a, node.b)))
    top = _strip_casts(value)
    if accumulate is ReduceOp.SUM and isinstance(top, Binary) and top.op is BinaryOp.MUL:
        fused += 1
    return operations - fused, operations


@dataclass
class _Context:
    trips: float = 1.0
    loops: tuple[tuple[Var, int], ...] = ()
    threads: tuple[tuple[Var, int, str], ...] = ()
    conditions: tuple[Expr, ...] = ()
    serial: float = 1.0
    pipelined: float | None = None
    vector: tuple[Var, int] | None = None


class _Walker:
    def __init__(self, kernel: Kernel, grid_axes: Collection[str],
                 intrinsics: Mapping[str, IntrinsicDecl], subgroup: int) -> None:
        self.kernel = kernel
        self.grid_axes = set(grid_axes)
        self.intrinsics = intrinsics
        self.subgroup = subgroup
        self.blocks = 1
        self.threads = 1
        self.instructions: dict[str, float] = {}
        self.flops = 0.0
        self.tensor_issues: dict[str, float] = {}
        self.tensor_macs = 0.0
        self.shared_wavefronts = 0.0
        self.shared_bytes = 0.0
        self.l2_bytes = 0.0
        self.global_bytes = 0.0
        self.rounds = 0.0
        self.shared_alloc = 0
        self.fragment_words = 0
        self.touched: dict[str, Buffer] = {}
        self.warp_fragments = _warp_fragments(kernel.body, intrinsics)
        self.lane_gathers = _lane_gathers(kernel.body, intrinsics)

    # --- accesses ------------------------------------------------------------------------
    def _lanes(self, ctx: _Context) -> tuple[dict[Var, np.ndarray], np.ndarray, int]:
        order = sorted(ctx.threads, key=lambda item: item[2])
        total = math.prod(extent for _, extent, _ in order) if order else 1
        lanes = max(1, min(self.subgroup, total))
        env = lane_grid([(var, extent) for var, extent, _ in order], lanes)
        active = np.ones(lanes, dtype=bool)
        for condition in ctx.conditions:
            try:
                active &= np.broadcast_to(evaluate(condition, env).astype(bool), (lanes,))
            except NotEvaluable:
                continue
        return env, active, lanes

    def access(self, buffer: Buffer, elements: list[tuple[Expr, ...]], ctx: _Context,
               executions: float, *, read: bool, asynchronous: bool = False) -> None:
        """``executions`` thread-level accesses of ``elements`` (per lane) of ``buffer``."""
        if buffer.level not in ("global", "shared"):
            return
        env, active, lanes = self._lanes(ctx)
        if ctx.vector is not None:
            var, width = ctx.vector
            env = {**env, var: np.zeros(lanes, dtype=np.int64)}
            elements = [tuple(_shift(index, var, k) for index in indices)
                        for indices in elements for k in range(width)]
            executions /= width
        cost = warp_access(buffer, elements, env, active)
        if cost.lanes == 0:
            return
        warp_executions = executions / cost.lanes
        if buffer.level == "shared":
            self.shared_wavefronts += warp_executions * cost.wavefronts
            self.shared_bytes += warp_executions * cost.bytes
            return
        self.touched[buffer.name] = buffer
        self.l2_bytes += warp_executions * cost.sectors * 32
        self.global_bytes += warp_executions * cost.bytes
        if read:
            # an asynchronous copy waits at the pipeline's wait, not in the loops of its stage
            waits = ctx.pipelined if asynchronous and ctx.pipelined is not None else ctx.serial
            self.rounds = max(self.rounds, waits)

    def expression_loads(self, expr: Expr, ctx: _Context, executions: float) -> None:
        for node in walk_expr(expr):
            if isinstance(node, BufferLoad):
                self.access(node.buffer, [node.indices], ctx, executions, read=True)

    def region(self, region: Region, ctx: _Context, executions: float, *,
               read: bool, asynchronous: bool = False) -> None:
        count = math.prod(region.extents)
        if count > _MAX_REGION_ELEMENTS:
            # whole rows per lane: each counted as its elements, contiguous
            ctx = replace(ctx, vector=None)
            self.access(region.buffer, [region.base], ctx, executions * count, read=read,
                        asynchronous=asynchronous)
            return
        elements = []
        for offset in np.ndindex(*region.extents):
            elements.append(tuple(base + step * int(o) if o else base for base, step, o
                                  in zip(region.base, region.steps, offset, strict=True)))
        self.access(region.buffer, elements, replace(ctx, vector=None), executions, read=read,
                    asynchronous=asynchronous)

    # --- statements ----------------------------------------------------------------------
    def executions(self, ctx: _Context) -> float:
        extents = {var: extent for var, extent in ctx.loops}
        return ctx.trips * guard_fraction(ctx.conditions, extents)

    def visit(self, stmt: Stmt, ctx: _Context) -> None:
        if isinstance(stmt, For):
            self.loop(stmt, ctx)
        elif isinstance(stmt, Pipeline):
            extent = _extent(stmt.extent)
            inner = replace(ctx, trips=ctx.trips * extent,
                            loops=(*ctx.loops, (stmt.var, extent)),
                            serial=ctx.serial * max(1.0, extent / max(1, stmt.depth - 1)))
            inner = replace(inner, pipelined=inner.serial)
            for stage in stmt.stages:
                self.visit(stage, inner)
        elif isinstance(stmt, IfThenElse):
            self.expression_loads(stmt.cond, ctx, self.executions(ctx))
            self.visit(stmt.then_body, replace(ctx, conditions=(*ctx.conditions, stmt.cond)))
            if stmt.else_body is not None:
                self.visit(stmt.else_body,
                           replace(ctx, conditions=(*ctx.conditions, Not(stmt.cond))))
        elif isinstance(stmt, Allocate):
            self.allocate(stmt.buffer, ctx)
            self.visit(stmt.body, ctx)
        elif isinstance(stmt, (Store, AtomicUpdate, SubgroupReduce)):
            self.store(stmt, ctx)
        elif isinstance(stmt, Copy) and self._collective(stmt):
            self.fragment_copy(stmt, ctx)
        elif isinstance(stmt, (Copy, AsyncCopy)):
            executions = self.executions(ctx)
            asynchronous = isinstance(stmt, AsyncCopy)
            self.region(stmt.src, ctx, executions, read=True, asynchronous=asynchronous)
            self.region(stmt.dst, ctx, executions, read=False)
        elif isinstance(stmt, IntrinsicCall):
            self.intrinsic(stmt, ctx)
        else:
            for name in type(stmt).child_fields:
                value = getattr(stmt, name)
                children = value if isinstance(value, tuple) else (value,)
                for child in children:
                    if isinstance(child, Stmt):
                        self.visit(child, ctx)

    def loop(self, stmt: For, ctx: _Context) -> None:
        extent = _extent(stmt.extent)
        loops = (*ctx.loops, (stmt.var, extent))
        if stmt.kind is LoopKind.BOUND and stmt.axis in self.grid_axes:
            self.blocks *= max(1, extent)
            self.visit(stmt.body, replace(ctx, trips=ctx.trips * extent, loops=loops))
            return
        if stmt.kind is LoopKind.BOUND:
            self.threads *= max(1, extent)
            dim = len(ctx.threads) if stmt.axis is None else ord(stmt.axis[-1])
            self.visit(stmt.body, replace(ctx, trips=ctx.trips * extent, loops=loops,
                                          threads=(*ctx.threads, (stmt.var, extent, dim))))
            return
        vector = ctx.vector
        if stmt.kind is LoopKind.VECTOR and stmt.lanes > 1 and extent % stmt.lanes == 0:
            vector = (stmt.var, stmt.lanes)
        serial = ctx.serial * extent if stmt.kind in (LoopKind.SERIAL, LoopKind.PIPELINED) \
            else ctx.serial
        self.visit(stmt.body, replace(ctx, trips=ctx.trips * extent, loops=loops,
                                      serial=serial, vector=vector))

    def allocate(self, buffer: Buffer, ctx: _Context) -> None:
        if buffer.level == "shared":
            self.shared_alloc += buffer.nbytes
        elif buffer.level == "fragment":
            spread = self.subgroup if buffer.name in self.warp_fragments else 1
            self.fragment_words += -(-buffer.nbytes // (4 * spread))

    def _collective(self, stmt: Copy) -> bool:
        return any(region.buffer.level == "fragment"
                   and region.buffer.name in self.warp_fragments
                   for region in (stmt.src, stmt.dst))

    def _warps(self, ctx: _Context) -> float:
        """Warp-level executions of a warp-collective statement in ``ctx``."""
        threads = math.prod(extent for _, extent, _ in ctx.threads) if ctx.threads else 1
        return self.executions(ctx) / min(self.subgroup, threads)

    def fragment_copy(self, stmt: Copy, ctx: _Context) -> None:
        """A warp-wide ``load_matrix_sync`` / ``store_matrix_sync``: the whole tile once per
        warp; an mma.sync fragment's per-lane gather (or scatter) in shared memory as the
        wavefronts of its warp-wide accesses, bank conflicts included
        (:func:`tilecraft_nvidia_tc.codegen.mma_sync.shared_wavefronts`)."""
        warps = self._warps(ctx)
        gathered = next((self.lane_gathers[region.buffer.name] for region in (stmt.src, stmt.dst)
                         if region.buffer.name in self.lane_gathers), None)
        for region, read in ((stmt.src, True), (stmt.dst, False)):
            buffer = region.buffer
            moved = math.prod(region.extents) * buffer.dtype.bytes * buffer.lanes
            if buffer.level == "shared" and gathered is not None:
                from tilecraft_nvidia_tc.codegen.mma_sync import shared_wavefronts

                self.shared_wavefronts += warps * shared_wavefronts(
                    gathered, buffer.dtype.bytes, buffer.shape[-1])
                self.shared_bytes += warps * moved
            elif buffer.level == "shared":
                self.shared_wavefronts += warps * math.ceil(moved / (BANKS * WORD_BYTES))
                self.shared_bytes += warps * moved
            elif buffer.level == "global":
                self.touched[buffer.name] = buffer
                row = region.extents[-1] * buffer.dtype.bytes * buffer.lanes
                rows = math.prod(region.extents[:-1])
                self.l2_bytes += warps * rows * math.ceil(row / SECTOR_BYTES) * SECTOR_BYTES
                self.global_bytes += warps * moved
                if read:
                    self.rounds = max(self.rounds, ctx.serial)

    def store(self, stmt: Store | AtomicUpdate | SubgroupReduce, ctx: _Context) -> None:
        executions = self.executions(ctx)
        accumulate = stmt.accumulate if isinstance(stmt, Store) else ReduceOp.SUM
        instructions, operations = _instructions(stmt.value, accumulate)
        if instructions:
            nodes = _arithmetic(stmt.value)
            dtype = (stmt.buffer.dtype if accumulate is not None or not nodes
                     else nodes[0].dtype).value
            self.instructions[dtype] = self.instructions.get(dtype, 0.0) \
                + instructions * executions
            self.flops += operations * executions
        self.expression_loads(stmt.value, ctx, executions)
        for index in stmt.indices:
            self.expression_loads(index, ctx, executions)
        self.access(stmt.buffer, [stmt.indices], ctx, executions, read=accumulate is not None)

    def intrinsic(self, stmt: IntrinsicCall, ctx: _Context) -> None:
        calls = self._warps(ctx)
        decl = self.intrinsics.get(stmt.intrinsic)
        if decl is not None and decl.compute is not None:
            macs = math.prod(loop.extent for loop in decl.compute.loops)
            self.tensor_issues[stmt.intrinsic] = self.tensor_issues.get(stmt.intrinsic, 0.0) \
                + calls
            self.tensor_macs += calls * macs
        for region in stmt.operands:
            level = region.buffer.level
            moved = calls * math.prod(region.extents) * region.buffer.dtype.bytes
            if level == "shared":
                self.shared_wavefronts += moved / 128  # conflict-free (ldmatrix)
                self.shared_bytes += moved
            elif level == "global":
                self.touched[region.buffer.name] = region.buffer
                self.l2_bytes += moved
                self.global_bytes += moved
                self.rounds = max(self.rounds, ctx.serial)


def _warp_fragments(body: Stmt, intrinsics: Mapping[str, IntrinsicDecl]) -> frozenset[str]:
    """The fragment-level buffers that calls of the spec's Tensor Core intrinsics (those with
    a compute) take as operands: warp-collective, spread over a warp's lanes."""
    names: set[str] = set()

    def visit(stmt: Stmt) -> None:
        if isinstance(stmt, IntrinsicCall):
            decl = intrinsics.get(stmt.intrinsic)
            if decl is not None and decl.compute is not None:
                names.update(region.buffer.name for region in stmt.operands
                             if region.buffer.level == "fragment")
            return
        for name in type(stmt).child_fields:
            value = getattr(stmt, name)
            for child in value if isinstance(value, tuple) else (value,):
                if isinstance(child, Stmt):
                    visit(child)

    visit(body)
    return frozenset(names)


def _lane_gathers(body: Stmt, intrinsics: Mapping[str, IntrinsicDecl]) -> dict[str, str]:
    """The fragment buffers of mma.sync calls (each lane gathers its own registers), with
    their use (``matrix_a``, ``matrix_b``, ``accumulator``)."""
    from tilecraft_nvidia_tc.tensor_cores import mma_sync_shape

    uses: dict[str, str] = {}

    def visit(stmt: Stmt) -> None:
        if isinstance(stmt, IntrinsicCall):
            decl = intrinsics.get(stmt.intrinsic)
            if decl is not None and decl.compute is not None and mma_sync_shape(decl):
                for use, region in zip(("matrix_a", "matrix_b", "accumulator"),
                                       stmt.operands):
                    uses[region.buffer.name] = use
            return
        for name in type(stmt).child_fields:
            value = getattr(stmt, name)
            for child in value if isinstance(value, tuple) else (value,):
                if isinstance(child, Stmt):
                    visit(child)

    visit(body)
    return uses


def _shift(index: Expr, var: Var, k: int) -> Expr:
    """``index`` with ``var`` replaced by the constant ``k``."""
    from tilecraft.te.visit import substitute

    return substitute(index, {var: Const(k, var.dtype)}) if k else index


def profile_kernel(kernel: Kernel, *, grid_axes: Collection[str] = ("blockIdx.x", "blockIdx.y",
                                                                    "blockIdx.z"),
                   intrinsics: Mapping[str, IntrinsicDecl] | None = None,
                   subgroup: int = 32) -> KernelProfile:
    """The counts of ``kernel`` (module docstring); ``grid_axes`` are the axes of bound loops
    that enumerate blocks, ``intrinsics`` the spec's declarations by name."""
    walker = _Walker(kernel, grid_axes, intrinsics or {}, subgroup)
    walker.visit(kernel.body, _Context())
    launch = kernel.launch
    threads = math.prod(launch.block) if launch is not None else walker.threads
    blocks = math.prod(launch.grid) if launch is not None else walker.blocks
    shared = max(walker.shared_alloc, launch.shared_bytes if launch is not None else 0)
    touched = walker.touched.values()
    compulsory = float(sum(buffer.nbytes for buffer in touched))
    return KernelProfile(
        kernel=kernel.name, blocks=max(1, blocks), threads_per_block=max(1, threads),
        instructions=walker.instructions, flops=walker.flops,
        tensor_issues=walker.tensor_issues, tensor_macs=walker.tensor_macs,
        shared_wavefronts=walker.shared_wavefronts, shared_bytes_moved=walker.shared_bytes,
        l2_bytes=walker.l2_bytes, global_bytes_requested=walker.global_bytes,
        dram_bytes=min(compulsory, walker.l2_bytes) if walker.l2_bytes else compulsory,
        global_rounds=walker.rounds, shared_bytes_per_block=shared,
        registers_per_thread=walker.fragment_words + REGISTER_OVERHEAD)
