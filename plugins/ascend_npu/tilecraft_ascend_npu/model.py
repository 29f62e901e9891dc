"""The ascend_npu performance model: cycles of a Kernel IR kernel on an Ascend 910-like NPU,
stage by stage, from the spec (thesis §3.6.1 capacities, Table 3.1 bandwidth; see spec.yaml).

A Da Vinci AI core runs its units as independent pipes: MTE2 moves GM into the core, MTE1
moves L1 into L0A / L0B, the Cube multiplies fractals, Fixpipe drains L0C into UB, the vector
unit computes on UB, MTE3 writes back to GM. The model counts, for one block (one AI core's
share of the kernel: the body of the ``block_idx`` loop), the work of each stage:

- ``GM``: bytes read from and written to GM over the core's share of the off-chip bandwidth
  (``GM`` bandwidth / the cores running at once, at most what ``L1`` takes in per cycle);
- ``L1``: bytes moved from L1 (or staged through it) into L0A / L0B, at L0A's bandwidth;
- ``cube``: 16x16x16 fractal steps (``mad``), ``throughput_per_cycle`` of the intrinsic each —
  operands padded to whole fractals, as the hardware computes them;
- ``L0C``: bytes drained from L0C (Fixpipe) and zero fills of L0C, at L0C's bandwidth;
- ``vector``: repeats of the vector unit (``vector_bits`` per repeat) on UB;
- ``scalar``: element stores no other stage does (one per cycle).

Guards are taken as true (an upper bound for ragged edge tiles, which the hardware pads
anyway). The stages overlap through the double buffer: with ``T`` tiles per block (the trip
count of the innermost loop holding both a copy-in and a compute), a block takes one tile's
full latency to fill and drain plus ``T - 1`` times its slowest stage,
``sum(s) / T + (T - 1) / T * max(s)``. Blocks spread over the AI cores in
``ceil(blocks / cores)`` waves; one GM latency starts the kernel. The bound named is the stage
with the largest share.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Allocate, Buffer, BufferLoad, For, Kernel, LoopKind, Seq, Store
>>> from tilecraft.te import UnaryOp, Var, const
>>> from tilecraft.te.expr import Unary
>>> from tilecraft_ascend_npu.target import load_target_spec
>>> x, y = Buffer("x", (64, 4096), DType.FLOAT16), Buffer("y", (64, 4096), DType.FLOAT16)
>>> ub = Buffer("x_ub", (4096,), DType.FLOAT16, level="UB")
>>> b, i = Var("b"), Var("i")
>>> tile = Allocate(ub, Seq((
...     For(i, const(4096), LoopKind.SERIAL, Store(ub, (i,), BufferLoad(x, (b, i)))),
...     For(i, const(4096), LoopKind.VECTOR,
...         Store(ub, (i,), Unary(UnaryOp.EXP, BufferLoad(ub, (i,)))), lanes=128),
...     For(i, const(4096), LoopKind.SERIAL, Store(y, (b, i), BufferLoad(ub, (i,)))))))
>>> kernel = Kernel("expk", (x, y), ("y",), For(b, const(64), LoopKind.BOUND, tile,
...                                              axis="block_idx"))
>>> cost = estimate_kernel(kernel, load_target_spec())
>>> cost.bound, cost.blocks, cost.waves, cost.tiles_per_block
('GM', 64, 2, 1)
>>> cost.stages["GM"], cost.stages["vector"]   # 16 KB over 1200 / 32 B per cycle; 32 repeats
(436.9066666666667, 32.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from tilecraft.dtypes import DType
from tilecraft.errors import TargetError
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
    Seq,
    Stmt,
    Store,
    walk_expr,
)
from tilecraft.target.base import Estimate
from tilecraft.target.spec import TargetSpec
from tilecraft.te.expr import Binary, BinaryOp, Cast, Const, Expr, ReduceOp
from tilecraft_ascend_npu.codegen.kernel import levels_of

__all__ = ["KernelCost", "STAGES", "estimate_kernel", "to_estimate"]

#: the pipes of a Da Vinci core, in the order data flows through them
STAGES = ("GM", "L1", "cube", "L0C", "vector", "scalar")


@dataclass(frozen=True)
class KernelCost:
    """A kernel's modelled cost: ``stages`` are one block's cycles per stage (module
    docstring), ``block_cycles`` one block with the double buffer's overlap, ``cycles`` the
    whole kernel over ``waves`` of blocks."""

    kernel: str
    stages: Mapping[str, float]
    tiles_per_block: int
    blocks: int
    waves: int
    block_cycles: float
    cycles: float
    seconds: float
    bound: str
    counts: Mapping[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        """One line: time, bound and stage cycles per block."""
        stages = ", ".join(f"{name} {cycles:,.0f}" for name, cycles in self.stages.items()
                           if cycles)
        return (f"{self.kernel}: {self.seconds * 1e6:,.2f} us, {self.bound}-bound; "
                f"{self.blocks} blocks in {self.waves} waves, {self.tiles_per_block} tiles per "
                f"block; cycles per block: {stages}")


class _Machine:
    """The spec's figures the model uses."""

    def __init__(self, spec: TargetSpec, active_cores: int) -> None:
        self.spec = spec
        self.levels = levels_of(spec)
        memory = spec.memory
        self.on_chip = {self.levels.l1, *self.levels.cube, self.levels.vector}
        self.gm = memory.levels[0]
        inward = memory.level(self.levels.l1).bandwidth_bytes_per_cycle
        self.gm_bytes_per_cycle = min(self.gm.bandwidth_bytes_per_cycle / active_cores, inward)
        self.l0_bytes_per_cycle = memory.level(self.levels.l0a).bandwidth_bytes_per_cycle
        self.l0c_bytes_per_cycle = memory.level(self.levels.l0c).bandwidth_bytes_per_cycle
        self.vector_bytes = spec.compute.vector_bits // 8
        mads = [i for i in spec.intrinsics if i.name.startswith("mad_")]
        self.cube_macs = {}
        for mad in mads:
            dtype = mad.compute.operands[0].dtype
            macs = math.prod(loop.extent for loop in mad.compute.loops)
            self.cube_macs[dtype] = (macs, mad.throughput_per_cycle)

    def level(self, buffer: Buffer) -> str:
        return buffer.level if buffer.level in self.on_chip else self.gm.name

    def mad_steps(self, macs: float, dtype: DType) -> tuple[float, float]:
        """Fractal steps and Cube cycles of ``macs`` multiply-adds on ``dtype`` operands."""
        per_step, throughput = self.cube_macs.get(dtype) or next(iter(self.cube_macs.values()))
        return macs / per_step, macs / per_step / throughput


def _extent(loop: For) -> int:
    return int(loop.extent.value) if isinstance(loop.extent, Const) else 1


def _loads(expr: Expr) -> list[BufferLoad]:
    return [node for node in walk_expr(expr) if isinstance(node, BufferLoad)]


def _strip(expr: Expr) -> Expr:
    return expr.x if isinstance(expr, Cast) else expr


class _Counter:
    """Walks one block's statements, adding each one's work to its stage."""

    def __init__(self, machine: _Machine) -> None:
        self.machine = machine
        self.stages = dict.fromkeys(STAGES, 0.0)
        self.counts = {"gm_bytes": 0.0, "mads": 0.0, "vector_repeats": 0.0}

    def add(self, stage: str, cycles: float) -> None:
        self.stages[stage] += cycles

    def gm_bytes(self, nbytes: float) -> None:
        self.counts["gm_bytes"] += nbytes
        self.add("GM", nbytes / self.machine.gm_bytes_per_cycle)

    def move(self, dst: str, src: str, nbytes: float, dtype_bytes: int) -> None:
        """``nbytes`` from level ``src`` into level ``dst``, through the pipes the code
        generator uses (GM -> L1 -> L0A / L0B, L0C -> UB -> GM)."""
        m, levels = self.machine, self.machine.levels
        gm = m.gm.name
        if gm in (src, dst):
            self.gm_bytes(nbytes)
        if dst in (levels.l0a, levels.l0b) and src in (gm, levels.l1):
            self.add("L1", nbytes / m.l0_bytes_per_cycle)
        if src == levels.l0c:
            # Fixpipe moves the fp32 accumulators
            self.add("L0C", nbytes / dtype_bytes * 4 / m.l0c_bytes_per_cycle)
        if src == dst == levels.vector:
            self.vector(nbytes)

    def vector(self, nbytes: float, row_bytes: float | None = None) -> None:
        """``nbytes`` through the vector unit in rows of ``row_bytes`` (the innermost loop's
        run; one call each): a row takes whole repeats."""
        per_repeat = self.machine.vector_bytes
        repeats = (nbytes / per_repeat if not row_bytes else
                   nbytes / row_bytes * math.ceil(row_bytes / per_repeat))
        self.counts["vector_repeats"] += repeats
        self.add("vector", repeats)

    def store(self, store: Store, times: float, row: int) -> None:
        """``store`` run ``times`` times, in rows of ``row`` (its innermost loop's extent)."""
        m, levels = self.machine, self.machine.levels
        dst = m.level(store.buffer)
        nbytes = times * store.buffer.dtype.bytes
        row_bytes = row * store.buffer.dtype.bytes
        value = _strip(store.value)
        if store.accumulate is ReduceOp.SUM and dst == levels.l0c and \
                isinstance(value, Binary) and value.op is BinaryOp.MUL:
            operands = [_strip(value.a), _strip(value.b)]
            if all(isinstance(x, BufferLoad) for x in operands) and \
                    {m.level(x.buffer) for x in operands} == {levels.l0a, levels.l0b}:
                # one Mmad per whole-buffer nest (as the code generator emits it), on
                # operands padded to whole fractals
                (rows, cols), depth = store.buffer.shape, operands[0].buffer.shape[-1]
                calls = times / (rows * cols * depth)
                padded = math.prod(16 * math.ceil(x / 16) for x in (rows, cols, depth))
                steps, cycles = m.mad_steps(calls * padded, operands[0].buffer.dtype)
                self.counts["mads"] += steps
                self.add("cube", cycles)
                return
        loads = _loads(store.value)
        if isinstance(value, Const) or not loads:
            if dst == levels.l0c:
                self.add("L0C", nbytes / m.l0c_bytes_per_cycle)
            elif dst == levels.vector:
                self.vector(nbytes, row_bytes)
            elif dst == m.gm.name:
                self.gm_bytes(nbytes)
            else:
                self.add("scalar", times)
            return
        if isinstance(value, BufferLoad) and store.accumulate is None:
            self.move(dst, m.level(value.buffer), nbytes, store.buffer.dtype.bytes)
            return
        # a computed value: operands brought in, the result computed where it is stored
        for load in loads:
            src = m.level(load.buffer)
            if src != dst:
                self.move(dst, src, times * load.buffer.dtype.bytes, load.buffer.dtype.bytes)
        if dst == levels.vector:
            self.vector(nbytes, row_bytes)
        elif dst == m.gm.name:
            self.gm_bytes(nbytes)
            self.add("scalar", times)
        else:
            self.add("scalar", times)

    def copy(self, copy: Copy, times: float) -> None:
        m = self.machine
        elements = math.prod(copy.dst.extents)
        self.move(m.level(copy.dst.buffer), m.level(copy.src.buffer),
                  times * elements * copy.dst.buffer.dtype.bytes, copy.dst.buffer.dtype.bytes)

    def call(self, call: IntrinsicCall, times: float) -> None:
        m = self.machine
        intrinsic = m.spec.intrinsic(call.intrinsic)
        if call.intrinsic.startswith("mad_"):
            self.counts["mads"] += times
            self.add("cube", times / intrinsic.throughput_per_cycle)
        else:
            self.counts["vector_repeats"] += times
            self.add("vector", times / intrinsic.throughput_per_cycle)

    def visit(self, stmt: Stmt, times: float, row: int = 1) -> None:
        """Count ``stmt`` run ``times`` times; ``row``: the innermost enclosing loop's extent."""
        if isinstance(stmt, Seq):
            for child in stmt.stmts:
                self.visit(child, times, row)
        elif isinstance(stmt, For):
            if stmt.kind is LoopKind.BOUND:
                self.visit(stmt.body, times, row)
            else:
                self.visit(stmt.body, times * _extent(stmt), _extent(stmt))
        elif isinstance(stmt, Allocate):
            self.visit(stmt.body, times, row)
        elif isinstance(stmt, IfThenElse):
            self.visit(stmt.then_body, times, row)
            if stmt.else_body is not None:
                self.visit(stmt.else_body, times, row)
        elif isinstance(stmt, Store):
            self.store(stmt, times, row)
        elif isinstance(stmt, Copy):
            self.copy(stmt, times)
        elif isinstance(stmt, IntrinsicCall):
            self.call(stmt, times)


def _blocks(stmt: Stmt) -> int:
    """The product of the extents of the block-bound loops (one per AI core instance)."""
    if isinstance(stmt, For):
        own = _extent(stmt) if stmt.kind is LoopKind.BOUND else 1
        return own * _blocks(stmt.body)
    children = (stmt.stmts if isinstance(stmt, Seq) else
                (stmt.body,) if isinstance(stmt, Allocate) else
                tuple(s for s in (stmt.then_body, stmt.else_body) if s is not None)
                if isinstance(stmt, IfThenElse) else ())
    return max((_blocks(child) for child in children), default=1)


def _reads_gm(stmt: Stmt, machine: _Machine) -> bool:
    gm = machine.gm.name
    for node in _walk(stmt):
        if isinstance(node, Store) and machine.level(node.buffer) != gm and any(
                machine.level(load.buffer) == gm for load in _loads(node.value)):
            return True
        if isinstance(node, Copy) and machine.level(node.src.buffer) == gm:
            return True
    return False


def _computes(stmt: Stmt, machine: _Machine) -> bool:
    for node in _walk(stmt):
        if isinstance(node, IntrinsicCall):
            return True
        if isinstance(node, Store) and (node.accumulate is not None or not isinstance(
                node.value, BufferLoad | Const)):
            return True
    return False


def _walk(stmt: Stmt):
    yield stmt
    if isinstance(stmt, Seq):
        for child in stmt.stmts:
            yield from _walk(child)
    elif isinstance(stmt, For | Allocate):
        yield from _walk(stmt.body)
    elif isinstance(stmt, IfThenElse):
        yield from _walk(stmt.then_body)
        if stmt.else_body is not None:
            yield from _walk(stmt.else_body)


def _tiles(stmt: Stmt, machine: _Machine, trips: int = 1) -> int:
    """The pipelined tiles of a block: the trip count (within a block) of the innermost loop
    holding both a copy-in from GM and a compute; 1 when none does."""
    best = 1
    if isinstance(stmt, For):
        inner = trips if stmt.kind is LoopKind.BOUND else trips * _extent(stmt)
        if stmt.kind is not LoopKind.BOUND and _reads_gm(stmt.body, machine) and \
                _computes(stmt.body, machine):
            best = inner
        return max(best, _tiles(stmt.body, machine, inner))
    if isinstance(stmt, Seq):
        return max((_tiles(child, machine, trips) for child in stmt.stmts), default=1)
    if isinstance(stmt, Allocate):
        return _tiles(stmt.body, machine, trips)
    if isinstance(stmt, IfThenElse):
        return max(_tiles(s, machine, trips) for s in (stmt.then_body, stmt.else_body)
                   if s is not None)
    return best


def estimate_kernel(kernel: Kernel, spec: TargetSpec) -> KernelCost:
    """The modelled cost of ``kernel`` on the NPU of ``spec`` (module docstring)."""
    blocks = _blocks(kernel.body)
    cores = spec.compute.cores
    machine = _Machine(spec, min(blocks, cores))
    counter = _Counter(machine)
    counter.visit(kernel.body, 1.0)
    stages = counter.stages
    tiles = _tiles(kernel.body, machine)
    total, slowest = sum(stages.values()), max(stages.values())
    block_cycles = total / tiles + (tiles - 1) / tiles * slowest
    waves = math.ceil(blocks / cores)
    cycles = waves * block_cycles + machine.gm.latency_cycles
    bound = max(STAGES, key=lambda name: stages[name]) if total else "GM"
    return KernelCost(kernel.name, stages, tiles, blocks, waves, block_cycles, cycles,
                      cycles / spec.compute.frequency_hz, bound, dict(counter.counts))


def to_estimate(cost: KernelCost) -> Estimate:
    """The target's :class:`~tilecraft.target.base.Estimate` of ``cost``: its detail holds
    each stage's cycles per block, the blocks, waves and tiles, and the bound (as the index
    of :data:`STAGES`)."""
    if not math.isfinite(cost.seconds):
        raise TargetError(f"kernel {cost.kernel}: the ascend_npu model found no finite cost")
    detail = {f"{name}_cycles_per_block": cycles for name, cycles in cost.stages.items()}
    detail.update(blocks=float(cost.blocks), waves=float(cost.waves),
                  tiles_per_block=float(cost.tiles_per_block), cycles=cost.cycles,
                  bound_stage=float(STAGES.index(cost.bound)))
    detail.update({name: float(value) for name, value in cost.counts.items()})
    return Estimate(cost.seconds, detail)
