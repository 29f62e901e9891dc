"""VECTOR loops in explicit ``<lanes x T>`` form, with a masked tail and lane-wise reductions.

A loop ``for v in vector(n, lanes=N)`` becomes

- a main loop over ``base = 0, N, 2N, ... < n - n % N`` whose body runs all N lanes unmasked;
- one tail iteration at ``base = n - n % N`` with the mask ``lane < n % N`` (masked loads,
  stores, gathers and scatters touch only the active lanes) — emitted only when the extent is
  dynamic or not a multiple of N;
- for each accumulating store into a location that does not depend on ``v`` (a reduction):
  a vector of partial results, initialised to the reduction's identity before the loop,
  updated lane-wise (inactive lanes contribute the identity), and combined horizontally and
  into memory after the loop. Floating-point sums are therefore reassociated: N interleaved
  partial sums plus a tree at the end, not the sequential order. Reductions inside inner loops
  of the body are combined across lanes at each update instead.

A condition that varies across lanes narrows the mask of its branches (each branch is skipped
when no lane takes it). Bodies that cannot run lane-parallel (see
:func:`~tilecraft_x86_avx512.codegen.analysis.vector_blocker`) are emitted as a scalar loop,
which LLVM's loop vectorizer may still vectorise; the Source notes say so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilecraft.kernel_ir.nodes import For, IfThenElse, Stmt, Store
from tilecraft.te.expr import ReduceOp
from tilecraft_x86_avx512.codegen.analysis import const_int, reduction_stores, vector_blocker
from tilecraft_x86_avx512.codegen.builder import Value, index_const
from tilecraft_x86_avx512.codegen.context import PartialSlot, VectorState
from tilecraft_x86_avx512.codegen.types import (
    INDEX,
    compute_type,
    identity,
    mangle,
    vector_type,
)

if TYPE_CHECKING:
    from tilecraft.dtypes import DType
    from tilecraft_x86_avx512.codegen.stmt import StmtEmitter


def _iota(lanes: int) -> Value:
    return Value("<" + ", ".join(f"i64 {k}" for k in range(lanes)) + ">", INDEX, lanes)


class VectorLoopEmitter:
    def __init__(self, stmts: StmtEmitter) -> None:
        self.stmts = stmts
        self.ctx = stmts.ctx
        self.fb = stmts.ctx.fb
        self.exprs = stmts.exprs

    def emit(self, loop: For) -> None:
        ctx = self.ctx
        lanes = loop.lanes or ctx.options.default_lanes
        if lanes > ctx.options.max_lanes:
            raise ctx.error(f"the vector loop over {loop.var.name!r} asks for {lanes} lanes; "
                            f"at most {ctx.options.max_lanes} are supported: split it first")
        if ctx.vector is not None:
            ctx.notes.append(f"vector loop over {loop.var.name} inside the vector loop over "
                             f"{ctx.vector.var.name}: emitted as a serial loop")
            self.stmts.serial_loop(loop)
            return
        if lanes == 1:
            self.stmts.serial_loop(loop)
            return
        blocker = vector_blocker(loop)
        if blocker is not None:
            ctx.notes.append(f"vector loop over {loop.var.name} emitted as a scalar loop: "
                             f"{blocker}")
            self.stmts.serial_loop(loop)
            return
        self._vector_loop(loop, lanes)

    def _vector_loop(self, loop: For, lanes: int) -> None:
        fb = self.fb
        extent = self.stmts.uniform_index(loop.extent, f"the extent of {loop.var.name}")
        known = const_int(loop.extent)
        if known is not None:
            known = max(known, 0)
        stores = reduction_stores(loop)
        # reductions keep several independent partial vectors so that consecutive updates do
        # not wait on each other (one vaddps chain is latency-bound)
        copies = self.ctx.options.reduction_interleave if stores else 1
        if known is not None and known < 2 * copies * lanes:
            copies = 1
        slot_sets = [self._open_partials(stores, lanes) for _ in range(copies)]
        done_md = fb.module.loop_metadata(['!"llvm.loop.isvectorized", i32 1'])
        hint = f"{loop.var.name}.vec"

        def steps(start: Value, end: Value, width: int, known_trips: int | None) -> None:
            def body(base: Value) -> None:
                for copy in range(width):
                    offset = fb.binop("add", base, index_const(copy * lanes), "nsw") \
                        if copy else base
                    self._body(loop, lanes, offset, None, slot_sets[copy])

            if known_trips == 0:
                return
            if known_trips == 1:
                body(start)
                return
            fb.counted_loop(start, end, width * lanes, body, done_md, hint=hint)

        # [0, wide_end) in steps of copies * lanes, [wide_end, full_end) in steps of lanes,
        # then the masked tail [full_end, extent)
        wide = copies * lanes if copies > 1 else None
        wide_end = self._round_down(extent, known, wide) if wide else index_const(0)
        full_end = self._round_down(extent, known, lanes)
        if wide:
            steps(index_const(0), wide_end, copies, None if known is None else known // wide)
        rest_trips = None
        if known is not None:
            rest_trips = (known // lanes * lanes - (known // wide * wide if wide else 0)) // lanes
        steps(wide_end, full_end, 1, rest_trips)
        if known is not None:
            if known % lanes:
                self._body(loop, lanes, full_end, self._tail_mask(
                    index_const(known % lanes), lanes), slot_sets[0])
        else:
            def tail() -> None:
                remainder = fb.binop("sub", extent, full_end, "nsw")
                self._body(loop, lanes, full_end, self._tail_mask(remainder, lanes),
                           slot_sets[0])

            fb.if_then(fb.compare("icmp", "slt", full_end, extent), tail, hint="tail")
        self._close_partials(stores, slot_sets)

    def _round_down(self, extent: Value, known: int | None, multiple: int) -> Value:
        """``extent`` rounded down to a multiple of ``multiple`` (a negative extent gives a
        bound no loop runs up to)."""
        if known is not None:
            return index_const(known // multiple * multiple)
        trips = self.fb.binop("sdiv", extent, index_const(multiple))
        return self.fb.binop("mul", trips, index_const(multiple), "nsw")

    def _tail_mask(self, remainder: Value, lanes: int) -> Value:
        return self.fb.compare("icmp", "slt", _iota(lanes), remainder)

    def _body(self, loop: For, lanes: int, base: Value, mask: Value | None,
              slots: dict[int, PartialSlot]) -> None:
        lane_index = self.fb.binop("add", self.fb.broadcast(base, lanes), _iota(lanes), "nsw")
        state = VectorState(loop.var, lanes, base, lane_index, mask, slots)
        with self.ctx.vector_scope(state):
            self.stmts.emit(loop.body)

    # reductions ------------------------------------------------------------------------------
    def _open_partials(self, stores: list[Store], lanes: int) -> dict[int, PartialSlot]:
        """One stack slot per reduction store, holding its identity in every lane."""
        slots: dict[int, PartialSlot] = {}
        for store in stores:
            assert store.accumulate is not None
            dtype = store.buffer.dtype
            elem = compute_type(dtype)
            vec = vector_type(elem, lanes)
            pointer = self.fb.alloca(vec, 1, 64, hint="partial")
            start = f"splat ({elem} {identity(store.accumulate, dtype)})"
            self.fb.emit(f"store {vec} {start}, ptr {pointer}, align 64")
            slots[id(store)] = PartialSlot(pointer, elem, lanes, store.accumulate, dtype)
        return slots

    def _load_slot(self, slot: PartialSlot) -> Value:
        vec = vector_type(slot.elem, slot.lanes)
        return Value(self.fb.define(f"load {vec}, ptr {slot.pointer}, align 64", "acc"),
                     slot.elem, slot.lanes)

    def _close_partials(self, stores: list[Store],
                        slot_sets: list[dict[int, PartialSlot]]) -> None:
        """Combine the partial vectors lane-wise, then across lanes, then into memory."""
        for store in stores:
            slot = slot_sets[0][id(store)]
            combined = self._load_slot(slot)
            for other in slot_sets[1:]:
                combined = self.exprs.combine(slot.op, combined,
                                              self._load_slot(other[id(store)]), slot.dtype)
            reduced = self.exprs.horizontal(slot.op, combined, slot.dtype)
            self.stmts.accumulate_scalar(store, reduced)

    def _masked(self, op: ReduceOp, value: Value, dtype: DType) -> Value:
        """``value`` as a vector whose inactive lanes hold the identity of ``op``."""
        vector = self.ctx.vector
        assert vector is not None
        wide = self.fb.broadcast(value, vector.lanes)
        if vector.mask is None:
            return wide
        neutral = Value(identity(op, dtype), value.elem)
        return self.fb.select(vector.mask, wide, neutral)

    def update_partial(self, slot: PartialSlot, value: Value) -> None:
        vector = self.ctx.vector
        assert vector is not None
        current = self._load_slot(slot)
        updated = self.exprs.combine(slot.op, current, self._masked(slot.op, value, slot.dtype),
                                     slot.dtype)
        self.fb.emit(f"store {updated.typed}, ptr {slot.pointer}, align 64")

    def reduce_lanes(self, op: ReduceOp, value: Value, dtype: DType) -> Value:
        """The active lanes of ``value`` combined with ``op`` (a scalar)."""
        return self.exprs.horizontal(op, self._masked(op, value, dtype), dtype)

    # lane-varying conditions -----------------------------------------------------------------
    def masked_branches(self, stmt: IfThenElse, cond: Value) -> None:
        vector = self.ctx.vector
        assert vector is not None
        outer = vector.mask
        then_mask = cond if outer is None else self.fb.binop("and", outer, cond)
        self._guarded(then_mask, stmt.then_body)
        if stmt.else_body is not None:
            negated = self.fb.binop("xor", cond, Value("true", "i1"))
            else_mask = negated if outer is None else self.fb.binop("and", outer, negated)
            self._guarded(else_mask, stmt.else_body)

    def _guarded(self, mask: Value, body: Stmt) -> None:
        any_lane = self.fb.call(f"llvm.vector.reduce.or.{mangle('i1', mask.lanes)}", "i1",
                                [mask])

        def run() -> None:
            with self.ctx.masked(mask):
                self.stmts.emit(body)

        self.fb.if_then(any_lane, run, hint="lanes")
