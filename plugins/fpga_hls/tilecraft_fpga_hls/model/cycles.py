"""Cycles and resources of a kernel's HLS design, walked from its Kernel IR (the model of
thesis §4.4-4.5: FPGA candidates are estimated, because synthesis takes hours).

Time follows Eq. 4.6 (``time = workload / #PE × max(R, C, W)``) refined per stage:

- a **pipelined** loop of ``n`` trips takes ``(n - 1) × II + depth`` cycles: ``depth`` is the
  latency of one iteration (the chain of its operators, :mod:`.operators`, plus memory
  latencies), ``II`` the requested initiation interval raised to what the loop allows — a
  recurrence (an accumulation into one element) needs ``II ≥`` the combining operator's
  latency, an on-chip buffer serves two accesses per bank per cycle (``ARRAY_PARTITION``
  multiplies the banks), a stream one element, an AXI port one beat of ``axi_port_bits``
  (:mod:`..device`): the consecutive elements an unrolled loop reads or writes along a
  parameter's last dimension share ``ceil(n × bytes / port bytes)`` beats, any other access
  takes a beat of its own;
- loops inside a pipelined loop, and ``unrolled`` loops, are copies of hardware: their trips
  multiply the resources, not the time;
- a serial loop repeats its body (plus a cycle of loop control per trip); a perfect nest of
  serial loops of constant extent over a pipelined loop of constant extent is flattened into
  one pipeline (HLS's ``loop_flatten``, on by default for such perfect nests);
- a **dataflow** region overlaps its stages: it takes its slowest stage plus the pipeline fill
  of the others; each stage takes ``max(its compute cycles, its DDR bytes / the DDR bandwidth
  in bytes per cycle)`` — R and W are the read and write stages' AXI traffic, C the compute.

Resources: every operator instance (times the hardware copies around it), BRAM18K / URAM
blocks of each on-chip buffer from its size, element width and partition banks, registers of
register-level buffers, stream FIFOs, AXI adapters and loop control.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tilecraft.codegen import int_range_of
from tilecraft.dtypes import DType
from tilecraft.kernel_ir.concurrency import Dataflow
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
    PartitionKind,
    Seq,
    Stmt,
    Store,
    StreamPop,
    StreamPush,
    expr_children,
    walk_expr,
)
from tilecraft.te.bounds import affine
from tilecraft.te.expr import (
    ROUNDING_UNARY,
    Binary,
    BinaryOp,
    Cast,
    Compare,
    Const,
    Expr,
    ReduceOp,
    Select,
    Unary,
    UnaryOp,
    Var,
)
from tilecraft_fpga_hls.codegen.statements import copy_loops, mac_array_loops
from tilecraft_fpga_hls.model.operators import OperatorCost, operator_cost

__all__ = ["DesignCycles", "Usage", "walk_design"]

#: cycles of latency: an on-chip (BRAM / URAM) read, an AXI read burst's first beat (Vitis
#: HLS's default m_axi latency), a stream read
BRAM_LATENCY, AXI_LATENCY, STREAM_LATENCY = 2, 64, 1
#: BRAM18K configurations (width bits, depth words) and URAM's one (72 x 4096)
BRAM18K_SHAPES = ((1, 16384), (2, 8192), (4, 4096), (9, 2048), (18, 1024), (36, 512))
URAM_SHAPE = (72, 4096)
#: rough fabric cost of one AXI master adapter (burst buffers in 2 BRAM18K), AXI-Lite
#: control, one loop's control logic
AXI_PORT = OperatorCost(0, 0, 1500, 2000)
AXI_PORT_BRAM18K = 2
CONTROL = OperatorCost(0, 0, 200, 300)
LOOP_CONTROL = OperatorCost(1, 0, 40, 30)
#: FIFOs up to this depth are shift registers in LUTs, deeper ones BRAM
SRL_DEPTH = 32

_BINARY_OPERATOR = {BinaryOp.ADD: "add", BinaryOp.SUB: "add", BinaryOp.MUL: "mul",
                    BinaryOp.DIV: "div", BinaryOp.FLOORDIV: "div", BinaryOp.MOD: "div",
                    BinaryOp.MAX: "cmp", BinaryOp.MIN: "cmp",
                    BinaryOp.BITWISE_AND: "bitwise", BinaryOp.BITWISE_OR: "bitwise",
                    BinaryOp.BITWISE_XOR: "bitwise", BinaryOp.SHIFT_LEFT: "shift",
                    BinaryOp.SHIFT_RIGHT: "shift"}
_UNARY_OPERATOR = {UnaryOp.EXP: "exp", UnaryOp.LOG: "log", UnaryOp.SQRT: "sqrt"}


@dataclass
class Usage:
    """Fabric resources of a design."""

    dsp: float = 0.0
    bram18k: float = 0.0
    uram: float = 0.0
    lut: float = 0.0
    ff: float = 0.0

    def add(self, cost: OperatorCost, copies: float = 1.0) -> None:
        self.dsp += cost.dsp * copies
        self.lut += cost.lut * copies
        self.ff += cost.ff * copies


@dataclass
class _Cost:
    """One execution of a statement: its ``cycles`` run alone, its ``depth`` (latency inside
    a pipeline), the ``fill`` before its first result, the DDR bytes it moves and the
    accesses per buffer / port / stream (keyed by identity)."""

    cycles: float = 0.0
    depth: float = 0.0
    fill: float = 0.0
    ddr_bytes: float = 0.0
    #: (buffer or stream id, the loop variables its indices use) -> accesses
    accesses: dict[tuple[int, frozenset[Var]], float] = field(default_factory=dict)
    recurrence: float = 0.0

    def then(self, other: _Cost) -> _Cost:
        accesses = dict(self.accesses)
        for key, count in other.accesses.items():
            accesses[key] = accesses.get(key, 0.0) + count
        return _Cost(self.cycles + other.cycles, self.depth + other.depth,
                     self.fill or other.fill, self.ddr_bytes + other.ddr_bytes, accesses,
                     max(self.recurrence, other.recurrence))

    def times(self, trips: float, cycles: float, var: Var | None = None) -> _Cost:
        """``trips`` executions; with ``var`` (an unrolled loop's), only the accesses whose
        index uses ``var`` multiply — the others read one element, shared by the copies."""
        return _Cost(cycles, cycles, self.fill, self.ddr_bytes * trips,
                     {key: count * (trips if var is None or var in key[1] else 1)
                      for key, count in self.accesses.items()}, self.recurrence)

    def per_memory(self) -> dict[int, float]:
        """Accesses per buffer or stream (by identity)."""
        totals: dict[int, float] = {}
        for (key, _), count in self.accesses.items():
            totals[key] = totals.get(key, 0.0) + count
        return totals


@dataclass(frozen=True)
class StageCycles:
    """One dataflow stage (or a kernel's whole body): its compute cycles and DDR traffic."""

    name: str
    compute_cycles: float
    ddr_bytes: float
    memory_cycles: float

    @property
    def cycles(self) -> float:
        return max(self.compute_cycles, self.memory_cycles)


@dataclass
class DesignCycles:
    """What :func:`walk_design` found: total cycles, the stages, resources and the loops whose
    II had to be raised (with why)."""

    cycles: float
    stages: list[StageCycles]
    usage: Usage
    initiation_intervals: dict[str, tuple[int, int, str]]


def walk_design(kernel: Kernel, ddr_bytes_per_cycle: float,
                axi_port_bytes: int = 64) -> DesignCycles:
    """The cycles and resources of ``kernel``'s design (module docstring); an AXI port moves
    ``axi_port_bytes`` per cycle."""
    walker = _Walker(kernel, ddr_bytes_per_cycle, axi_port_bytes)
    cost = walker.cost(kernel.body)
    if not walker.stages:
        walker.stages.append(walker.stage("body", cost))
        cycles = walker.stages[0].cycles
    else:
        cycles = max(cost.cycles, cost.ddr_bytes / ddr_bytes_per_cycle)
    walker.usage.add(CONTROL)
    for _ in kernel.params:
        walker.usage.add(AXI_PORT)
        walker.usage.bram18k += AXI_PORT_BRAM18K
    return DesignCycles(cycles, walker.stages, walker.usage, walker.initiation_intervals)


def _blocks(words: int, bits: int, shapes: tuple[tuple[int, int], ...]) -> int:
    return min(math.ceil(bits / width) * math.ceil(words / depth) for width, depth in shapes)


def buffer_blocks(buffer: Buffer) -> tuple[int, int]:
    """(BRAM18K blocks, URAM blocks) of an on-chip ``buffer``: one memory per partition
    bank, each sized for its words of the element width.

    >>> from tilecraft.kernel_ir.nodes import ArrayPartition
    >>> buffer_blocks(Buffer("b", (1024, 8), DType.FLOAT32, level="BRAM"))  # 8192 x 32 bits
    (16, 0)
    >>> buffer_blocks(Buffer("b", (1024, 8), DType.FLOAT32, level="BRAM",
    ...               partitions=(ArrayPartition(1, PartitionKind.COMPLETE),)))
    (16, 0)
    >>> buffer_blocks(Buffer("b", (16, 8), DType.INT8, level="BRAM",
    ...               partitions=(ArrayPartition(1, PartitionKind.COMPLETE),)))
    (8, 0)
    """
    banks = 1
    for partition in buffer.partitions:
        extent = buffer.shape[partition.dim] if buffer.shape else 1
        banks *= extent if partition.kind is PartitionKind.COMPLETE else \
            min(extent, max(1, partition.factor))
    words = math.ceil(max(1, buffer.size) / banks)
    bits = buffer.dtype.bits
    if buffer.level == "URAM":
        return 0, banks * _blocks(words, bits, (URAM_SHAPE,))
    return banks * _blocks(words, bits, BRAM18K_SHAPES), 0


def _banks(buffer: Buffer) -> int:
    banks = 1
    for partition in buffer.partitions:
        extent = buffer.shape[partition.dim] if buffer.shape else 1
        banks *= extent if partition.kind is PartitionKind.COMPLETE else \
            min(extent, max(1, partition.factor))
    return banks


class _Walker:
    def __init__(self, kernel: Kernel, ddr_bytes_per_cycle: float,
                 axi_port_bytes: int) -> None:
        self.kernel = kernel
        self.bandwidth = ddr_bytes_per_cycle
        self.port_bytes = max(1, axi_port_bytes)
        #: (parameter id, loop variable) where the variable walks the parameter's last
        #: dimension with stride one and no other dimension: consecutive elements
        self.consecutive: set[tuple[int, Var]] = set()
        self.params = {id(buffer) for buffer in kernel.params}
        self.buffers: dict[int, Buffer] = {id(buffer): buffer for buffer in kernel.params}
        self.usage = Usage()
        self.copies = 1.0
        self.pipelined: Var | None = None
        self.ranges: dict[Var, tuple[int, int]] = {}
        self.stages: list[StageCycles] = []
        self.initiation_intervals: dict[str, tuple[int, int, str]] = {}

    def stage(self, name: str, cost: _Cost) -> StageCycles:
        return StageCycles(name, cost.cycles, cost.ddr_bytes, cost.ddr_bytes / self.bandwidth)

    # statements ----------------------------------------------------------------------------
    def cost(self, stmt: Stmt) -> _Cost:
        if isinstance(stmt, Seq):
            total = _Cost()
            for child in stmt.stmts:
                total = total.then(self.cost(child))
            return total
        if isinstance(stmt, Allocate):
            self._allocate(stmt.buffer)
            return self.cost(stmt.body)
        if isinstance(stmt, For):
            return self._loop(stmt)
        if isinstance(stmt, Dataflow):
            return self._dataflow(stmt)
        if isinstance(stmt, IfThenElse):
            then = self.cost(stmt.then_body)
            other = self.cost(stmt.else_body) if stmt.else_body is not None else _Cost()
            return then if then.cycles >= other.cycles else other
        if isinstance(stmt, Copy):
            return self.cost(copy_loops(stmt, pipelined=self.pipelined is not None))
        if isinstance(stmt, IntrinsicCall):
            return self.cost(mac_array_loops(stmt, pipelined=self.pipelined is not None))
        if isinstance(stmt, Store):
            return self._store(stmt)
        if isinstance(stmt, StreamPush):
            cost = self._value(stmt.value)
            key = (id(stmt.stream), frozenset[Var]())
            cost.accesses[key] = cost.accesses.get(key, 0.0) + 1
            return self._statement(cost, 1)
        if isinstance(stmt, StreamPop):
            cost = _Cost(accesses={(id(stmt.stream), frozenset()): 1.0})
            latency = STREAM_LATENCY + self._access(stmt.buffer, stmt.indices, cost, load=False)
            return self._statement(cost, latency)
        return _Cost()  # the code generator refuses anything else

    def _statement(self, cost: _Cost, latency: float) -> _Cost:
        cost.depth += latency
        cost.cycles = cost.fill = cost.depth
        return cost

    def _store(self, stmt: Store) -> _Cost:
        cost = self._value(stmt.value)
        latency = 1.0 + self._access(stmt.buffer, stmt.indices, cost, load=False)
        if stmt.accumulate is not None:
            operator = {ReduceOp.SUM: "add", ReduceOp.PROD: "mul"}.get(stmt.accumulate, "cmp")
            combine = operator_cost(operator, stmt.buffer.dtype)
            self.usage.add(combine, self.copies)
            latency += combine.latency
            loop = self.pipelined
            if loop is not None and not any(node == loop for index in stmt.indices
                                            for node in walk_expr(index)):
                # the same element every iteration: the next add waits for this one
                cost.recurrence = max(cost.recurrence, combine.latency)
        return self._statement(cost, latency)

    def _access(self, buffer: Buffer, indices: tuple[Expr, ...], cost: _Cost,
                load: bool = True) -> float:
        """Record one access of ``buffer[indices]``; its latency."""
        self.buffers.setdefault(id(buffer), buffer)
        used = frozenset(node for index in indices for node in walk_expr(index)
                         if isinstance(node, Var))
        key = (id(buffer), used)
        cost.accesses[key] = cost.accesses.get(key, 0.0) + 1
        if id(buffer) in self.params:
            cost.ddr_bytes += buffer.dtype.bytes
            self._note_consecutive(buffer, indices)
            return AXI_LATENCY if load else 1.0
        return BRAM_LATENCY if load and buffer.level in ("BRAM", "URAM") else 0.0

    def _note_consecutive(self, buffer: Buffer, indices: tuple[Expr, ...]) -> None:
        if not indices:
            return
        last = affine(indices[-1])
        if last is None:
            return
        elsewhere = {node for index in indices[:-1] for node in walk_expr(index)
                     if isinstance(node, Var)}
        for var, coef in last.coefs:
            if coef == 1 and var not in elsewhere:
                self.consecutive.add((id(buffer), var))

    def _value(self, expr: Expr) -> _Cost:
        cost = _Cost()
        cost.depth = self._expr(expr, cost)
        return cost

    def _expr(self, expr: Expr, cost: _Cost) -> float:
        """The latency of ``expr``'s value path (indices are address logic, not counted)."""
        if isinstance(expr, BufferLoad):
            return self._access(expr.buffer, expr.indices, cost)
        operator: str | None = None
        dtype = expr.dtype
        if isinstance(expr, Binary):
            operator = _BINARY_OPERATOR.get(expr.op)
        elif isinstance(expr, Compare):
            operator, dtype = "cmp", expr.a.dtype
        elif isinstance(expr, Select):
            operator = "cmp"  # a multiplexer, about a comparator's cost
        elif isinstance(expr, Unary):
            operator = _UNARY_OPERATOR.get(expr.op) or (
                None if expr.op in (UnaryOp.NEG, UnaryOp.ABS, UnaryOp.BITWISE_NOT) else
                "cast" if expr.op in ROUNDING_UNARY else "transcendental")
        elif isinstance(expr, Cast) and (expr.to.is_float != expr.x.dtype.is_float or
                                         expr.to is not expr.x.dtype and expr.to.is_float):
            operator = "cast"
        latency = max((self._expr(child, cost) for child in expr_children(expr)),
                      default=0.0)
        if operator is None:
            return latency
        op_cost = operator_cost(operator, dtype if dtype is not DType.BOOL else DType.INT32)
        self.usage.add(op_cost, self.copies)
        return latency + op_cost.latency

    # loops ---------------------------------------------------------------------------------
    def _trips(self, extent: Expr) -> int:
        if isinstance(extent, Const):
            return max(0, int(extent.value))
        bounds = int_range_of(extent, self.ranges)
        return max(0, bounds[1]) if bounds is not None else 1

    def _loop(self, loop: For) -> _Cost:
        trips = self._trips(loop.extent)
        self.ranges[loop.var] = (0, max(0, trips - 1))
        self.usage.add(LOOP_CONTROL, self.copies)
        try:
            if self.pipelined is not None or loop.kind is LoopKind.UNROLLED:
                return self._unrolled(loop, trips)
            if loop.kind is LoopKind.PIPELINED:
                return self._pipelined(loop, trips)
            nest, inner = [], loop.body
            while isinstance(inner, For) and inner.kind is LoopKind.SERIAL \
                    and isinstance(inner.extent, Const):
                nest.append(inner)
                inner = inner.body
            if isinstance(inner, For) and inner.kind is LoopKind.PIPELINED \
                    and isinstance(inner.extent, Const):
                # a perfect nest of constant loops over a pipelined loop: HLS flattens it
                # into one pipeline
                nest.append(inner)
                flat = trips
                for level in nest:
                    self.usage.add(LOOP_CONTROL, self.copies)
                    self.ranges[level.var] = (0, max(0, int(level.extent.value) - 1))
                    flat *= int(level.extent.value)
                try:
                    return self._pipelined(inner, flat)
                finally:
                    for level in nest:
                        self.ranges.pop(level.var, None)
            body = self.cost(loop.body)
            return body.times(trips, trips * (body.cycles + LOOP_CONTROL.latency))
        finally:
            self.ranges.pop(loop.var, None)

    def _unrolled(self, loop: For, trips: int) -> _Cost:
        factor = loop.lanes if loop.kind is LoopKind.UNROLLED and 1 < loop.lanes < trips \
            else trips
        outer = self.copies
        self.copies *= max(1, factor)
        try:
            body = self.cost(loop.body)
        finally:
            self.copies = outer
        rounds = math.ceil(trips / max(1, factor)) if self.pipelined is None else 1
        result = body.times(trips, rounds * body.cycles, loop.var)
        result.depth = rounds * body.depth
        for key, count in body.accesses.items():
            if (key[0], loop.var) in self.consecutive and loop.var in key[1]:
                # consecutive elements of a parameter: they share wide AXI beats
                width = self.buffers[key[0]].dtype.bytes
                result.accesses[key] = count * math.ceil(trips * width / self.port_bytes)
        return result

    def _pipelined(self, loop: For, trips: int) -> _Cost:
        self.pipelined = loop.var
        try:
            body = self.cost(loop.body)
        finally:
            self.pipelined = None
        asked = loop.initiation_interval or 1
        achieved, why = asked, ""
        if body.recurrence > achieved:
            achieved, why = int(body.recurrence), "an accumulation into one element " \
                f"waits {int(body.recurrence)} cycles for the previous one"
        for key, count in body.per_memory().items():
            buffer = self.buffers.get(key)
            if buffer is None or buffer.level == "register":
                ports = float("inf") if buffer is not None else 1.0  # a stream: one per cycle
            elif key in self.params:
                ports = 1.0  # one AXI port per parameter, one beat per cycle
            else:
                ports = 2.0 * _banks(buffer)
            needed = math.ceil(count / ports) if ports != float("inf") else 1
            if needed > achieved:
                name = buffer.name if buffer is not None else "a stream"
                unit = "AXI beats" if key in self.params else "accesses"
                achieved, why = needed, (f"{int(count)} {unit} per iteration to {name} "
                                         f"through {int(ports)} port(s)")
        if achieved > asked:
            self.initiation_intervals[loop.var.name] = (asked, achieved, why)
        cycles = max(0, trips - 1) * achieved + body.depth + LOOP_CONTROL.latency
        result = body.times(trips, cycles)
        result.fill = body.depth
        return result

    def _dataflow(self, region: Dataflow) -> _Cost:
        for stream in region.streams:
            bits = stream.dtype.bits
            if stream.depth <= SRL_DEPTH:
                self.usage.add(OperatorCost(0, 0, bits, bits), self.copies)
            else:
                self.usage.bram18k += max(1, math.ceil(stream.depth * bits / 18432)) * \
                    self.copies
        stages = []
        for index, stmt in enumerate(region.stages):
            name = stmt.var.name if isinstance(stmt, For) and stmt.kind is LoopKind.STAGE \
                else f"stage{index}"
            cost = self.cost(stmt)
            stages.append((self.stage(name, cost), cost))
        self.stages.extend(stage for stage, _ in stages)
        slowest = max(range(len(stages)), key=lambda i: stages[i][0].cycles, default=0)
        cycles = (stages[slowest][0].cycles if stages else 0.0) + sum(
            cost.fill for i, (_, cost) in enumerate(stages) if i != slowest)
        total = _Cost()
        for _, cost in stages:
            total.ddr_bytes += cost.ddr_bytes
        total.cycles = total.depth = cycles
        total.fill = stages[0][1].fill if stages else 0.0
        return total

    def _allocate(self, buffer: Buffer) -> None:
        self.buffers[id(buffer)] = buffer
        if buffer.level == "register":
            self.usage.ff += buffer.size * buffer.dtype.bits * self.copies
            return
        bram, uram = buffer_blocks(buffer)
        self.usage.bram18k += bram * self.copies
        self.usage.uram += uram * self.copies
