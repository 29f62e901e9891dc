"""Buffer element addressing, loads and stores — scalar, contiguous vector, gather/scatter.

Inside a vector loop the access pattern follows from how the row-major element offset depends
on the loop variable (its affine coefficient):

- 0: the same element for every lane — a scalar load (broadcast when combined with vectors) or
  a scalar store;
- 1: consecutive elements — one vector load/store at the lane-0 address, masked
  (``llvm.masked.load/store``) when some lanes are inactive (the tail, or a lane-varying
  condition);
- a small constant stride ``s`` (2 to :data:`MAX_SHUFFLE_STRIDE`) on a load: one masked load
  of the ``s * (N - 1) + 1`` elements the lanes span (the mask keeps it inside them, so nothing
  past the last lane's element is touched) and a ``shufflevector`` picking every ``s``-th — a
  strided convolution's im2col rows; measured faster than a gather on Zen 5 (see
  ``tests/test_codegen_strided.py``);
- anything else: ``llvm.masked.gather`` / ``llvm.masked.scatter`` of per-lane addresses.

In LLVM 22 the masked intrinsics take no alignment operand: the alignment is an ``align``
attribute on the pointer argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tilecraft.kernel_ir.nodes import Buffer
from tilecraft.te.expr import Const, Expr
from tilecraft_x86_avx512.codegen import convert
from tilecraft_x86_avx512.codegen.analysis import (
    depends_on,
    flat_coefficient,
    lane_coefficient,
    unclamped,
    vector_flat_coefficient,
)
from tilecraft_x86_avx512.codegen.builder import Value
from tilecraft_x86_avx512.codegen.context import EmitContext
from tilecraft_x86_avx512.codegen.types import INDEX, mangle, storage_type, vector_type

if TYPE_CHECKING:
    from tilecraft_x86_avx512.codegen.expr import ExprEmitter


#: the largest lane stride a load reads as one wide masked load plus a shuffle
MAX_SHUFFLE_STRIDE = 4


class MemoryEmitter:
    def __init__(self, ctx: EmitContext, exprs: ExprEmitter) -> None:
        self.ctx = ctx
        self.fb = ctx.fb
        self.exprs = exprs

    # addresses -------------------------------------------------------------------------------
    def pointer(self, buffer: Buffer) -> str:
        if buffer not in self.ctx.pointers:
            raise self.ctx.error(
                f"buffer {buffer.name!r} is neither a kernel parameter nor allocated by an "
                "enclosing Allocate; add it to the kernel's params or wrap the code using it in "
                "an Allocate")
        return self.ctx.pointers[buffer]

    def offset(self, buffer: Buffer, indices: Sequence[Expr]) -> Value:
        """The row-major element offset of ``buffer[indices]`` in i64 (vector per lane when an
        index varies across lanes)."""
        if len(indices) != buffer.ndim:
            raise self.ctx.error(f"{buffer.name} has {buffer.ndim} dimensions but is indexed "
                                 f"with {len(indices)} indices; index every dimension")
        total: Value | None = None
        for index, stride in zip(indices, buffer.strides()):
            term = self.exprs.index(index)
            if term.ref == "0":
                continue
            if stride != 1:
                term = self.fb.binop("mul", term, Value(str(stride), INDEX), "nsw")
            total = term if total is None else self.fb.binop("add", total, term, "nsw")
        return total if total is not None else Value("0", INDEX)

    def address(self, buffer: Buffer, offset: Value) -> Value:
        """``ptr`` (or ``<lanes x ptr>``) of the element at ``offset``."""
        elem = storage_type(buffer.dtype)
        base = self.pointer(buffer)
        reg = self.fb.define(f"getelementptr {elem}, ptr {base}, {offset.typed}", "addr")
        return Value(reg, "ptr", offset.lanes)

    def _coefficient(self, buffer: Buffer, indices: Sequence[Expr]) -> int | None:
        """How the element offset moves from lane to lane inside one vector (see
        :func:`~.analysis.vector_flat_coefficient`); 0 outside vector loops."""
        vector = self.ctx.vector
        if vector is None:
            return 0
        return vector_flat_coefficient(buffer, indices, vector.var, vector.lanes)

    # loads -----------------------------------------------------------------------------------
    def load(self, buffer: Buffer, indices: Sequence[Expr]) -> Value:
        """``buffer[indices]`` in its compute type."""
        stored = self.load_stored(buffer, indices)
        return convert.to_compute(self.fb, stored, buffer.dtype)

    def load_stored(self, buffer: Buffer, indices: Sequence[Expr]) -> Value:
        fb, vector = self.fb, self.ctx.vector
        elem = storage_type(buffer.dtype)
        align = buffer.dtype.bytes
        coefficient = self._coefficient(buffer, indices)
        if vector is None or coefficient == 0:
            with self.ctx.lane_zero():  # lane-invariant inside the vector, maybe not across
                address = self.address(buffer, self.offset(buffer, indices))
            return Value(fb.define(f"load {elem}, ptr {address.ref}, align {align}", "ld"), elem)
        lanes, mask = vector.lanes, vector.mask
        vec = vector_type(elem, lanes)
        if coefficient == 1:
            with self.ctx.lane_zero():
                address = self.address(buffer, self.offset(buffer, indices))
            if mask is None:
                return Value(fb.define(f"load {vec}, ptr {address.ref}, align {align}", "vld"),
                             elem, lanes)
            name = f"llvm.masked.load.{mangle(elem, lanes)}.p0"
            return fb.call(name, elem, [("ptr", f"ptr align {align} {address.ref}"), mask,
                                        Value("poison", elem, lanes)], lanes)
        if coefficient is not None and 2 <= coefficient <= MAX_SHUFFLE_STRIDE:
            return self._strided_load(buffer, indices, coefficient)
        if coefficient is None and (clamped := self._clamped_load(buffer, indices)) is not None:
            return clamped
        addresses = self.address(buffer, fb.broadcast(self.offset(buffer, indices), lanes))
        name = f"llvm.masked.gather.{mangle(elem, lanes)}.{mangle('ptr', lanes)}"
        active = mask if mask is not None else Value("splat (i1 true)", "i1", lanes)
        return fb.call(name, elem, [(addresses.type, f"{addresses.type} align {align} "
                                     f"{addresses.ref}"), active,
                                    Value("poison", elem, lanes)], lanes)

    def _strided_load(self, buffer: Buffer, indices: Sequence[Expr], stride: int) -> Value:
        """Lanes ``i`` reading element ``base + stride * i``: a masked load of the span from
        ``base`` (only the elements some active lane reads are enabled) and a shuffle."""
        fb, vector = self.fb, self.ctx.vector
        assert vector is not None
        lanes, mask = vector.lanes, vector.mask
        elem = storage_type(buffer.dtype)
        align = buffer.dtype.bytes
        wide = stride * lanes
        with self.ctx.lane_zero():
            address = self.address(buffer, self.offset(buffer, indices))
        picks = ", ".join(f"i32 {stride * lane}" for lane in range(lanes))
        if mask is None:
            bits = ", ".join("i1 true" if j % stride == 0 else "i1 false" for j in range(wide))
            wide_mask = Value(f"<{bits}>", "i1", wide)
        else:  # lane i's bit at position stride * i, the others off
            spread = ", ".join(f"i32 {j // stride}" if j % stride == 0 else f"i32 {lanes}"
                               for j in range(wide))
            wide_mask = Value(fb.define(
                f"shufflevector {mask.typed}, {vector_type('i1', lanes)} zeroinitializer, "
                f"<{wide} x i32> <{spread}>", "wmask"), "i1", wide)
        span = fb.call(f"llvm.masked.load.{mangle(elem, wide)}.p0", elem,
                       [("ptr", f"ptr align {align} {address.ref}"), wide_mask,
                        Value("poison", elem, wide)], wide)
        picked = fb.define(f"shufflevector {span.typed}, {vector_type(elem, wide)} poison, "
                           f"<{lanes} x i32> <{picks}>", "strided")
        return Value(picked, elem, lanes)

    def _clamped_load(self, buffer: Buffer, indices: Sequence[Expr]) -> Value | None:
        """A load whose one lane-varying index is clamped, ``A[r, max(min(w - 1, hi), lo)]``
        (lowering's guard clamps, :mod:`tilecraft.lower.guards`), read without a gather: a
        masked contiguous (or strided) load of the lanes whose unclamped index is inside
        ``[lo, hi]``, blended with ``A[r, lo]`` / ``A[r, hi]`` for the lanes below / above.
        None where the access has another shape."""
        vector = self.ctx.vector
        assert vector is not None
        lanes = vector.lanes
        varying = [d for d, index in enumerate(indices) if depends_on(index, vector.var)]
        if len(varying) != 1:
            return None
        (dim,) = varying
        peeled = unclamped(indices[dim])
        if peeled is None:
            return None
        inner, lo, hi = peeled
        extent = buffer.shape[dim]
        if (lo is not None and not 0 <= lo < extent) or (hi is not None and not 0 <= hi < extent):
            return None
        unclamped_indices = (*indices[:dim], inner, *indices[dim + 1:])
        coefficient = vector_flat_coefficient(buffer, unclamped_indices, vector.var, lanes)
        coefficient_of_inner = lane_coefficient(inner, vector.var, lanes)
        if coefficient is None or not 1 <= coefficient <= MAX_SHUFFLE_STRIDE \
                or coefficient_of_inner is None or coefficient_of_inner <= 0:
            return None
        fb = self.fb
        # every lane inside the bounds (interior vectors: nearly all): the plain load
        with self.ctx.lane_zero():
            first = self.exprs.index(inner)
        last = fb.binop("add", first, Value(str(coefficient_of_inner * (lanes - 1)), INDEX))
        checks = ([fb.compare("icmp", "sge", first, Value(str(lo), INDEX))] if lo is not None
                  else []) + ([fb.compare("icmp", "sle", last, Value(str(hi), INDEX))]
                              if hi is not None else [])
        interior = checks[0] if len(checks) == 1 else fb.binop("and", checks[0], checks[1])
        plain_label, edge_label = fb.new_label("interior"), fb.new_label("edge")
        merge = fb.new_label("clamped")
        fb.cond_br(interior, plain_label, edge_label)
        fb.start_block(plain_label)
        plain = self.load_stored(buffer, unclamped_indices)
        plain_end = fb.block
        fb.br(merge)
        fb.start_block(edge_label)
        edge_value = self._edge_load(buffer, indices, dim, inner, lo, hi, unclamped_indices)
        edge_end = fb.block
        fb.br(merge)
        fb.start_block(merge)
        joined = fb.define(f"phi {plain.type} [ {plain.ref}, %{plain_end} ], "
                           f"[ {edge_value.ref}, %{edge_end} ]", "clamped")
        return Value(joined, plain.elem, plain.lanes)

    def _edge_load(self, buffer: Buffer, indices: Sequence[Expr], dim: int, inner: Expr,
                   lo: int | None, hi: int | None, unclamped_indices: tuple[Expr, ...]) -> Value:
        """The clamped load of a vector some of whose lanes the clamp moves (see
        :meth:`_clamped_load`)."""
        fb, vector = self.fb, self.ctx.vector
        assert vector is not None
        lanes = vector.lanes
        position = self.exprs.index(inner)  # per lane
        inside: Value | None = None
        edges: list[tuple[Value, Expr]] = []
        for bound, predicate in ((lo, "sge"), (hi, "sle")):
            if bound is None:
                continue
            ok = fb.compare("icmp", predicate, position, Value(str(bound), INDEX))
            inside = ok if inside is None else fb.binop("and", inside, ok)
            edges.append((ok, Const(bound, inner.dtype)))
        assert inside is not None
        mask = inside if vector.mask is None else fb.binop("and", inside, vector.mask)
        with self.ctx.masked(mask):
            value = self.load_stored(buffer, unclamped_indices)
        for ok, bound in edges:  # lanes the clamp moved read the edge element
            with self.ctx.lane_zero():
                edge = self.load_stored(buffer, (*indices[:dim], bound, *indices[dim + 1:]))
            value = fb.select(ok, value, fb.broadcast(edge, lanes))
        return value

    # stores ----------------------------------------------------------------------------------
    def store(self, buffer: Buffer, indices: Sequence[Expr], value: Value) -> None:
        """``buffer[indices] = value`` (a compute-type value; rounded to the storage type).
        Inside a vector loop only the active lanes are written."""
        fb, vector = self.fb, self.ctx.vector
        stored = convert.to_storage(fb, value, buffer.dtype)
        elem = storage_type(buffer.dtype)
        align = buffer.dtype.bytes
        coefficient = self._coefficient(buffer, indices)
        if coefficient == 0 and vector is not None:  # lanes collide: the scalar analysis
            coefficient = flat_coefficient(buffer, indices, vector.var)
        if vector is None or coefficient == 0:
            if stored.is_vector:
                raise self.ctx.error(f"a lane-varying value is stored to the lane-invariant "
                                     f"location {buffer.name}[...] of a vector loop")
            address = self.address(buffer, self.offset(buffer, indices))
            fb.emit(f"store {stored.typed}, ptr {address.ref}, align {align}")
            return
        lanes, mask = vector.lanes, vector.mask
        stored = fb.broadcast(stored, lanes)
        if coefficient == 1:
            with self.ctx.lane_zero():
                address = self.address(buffer, self.offset(buffer, indices))
            if mask is None:
                fb.emit(f"store {stored.typed}, ptr {address.ref}, align {align}")
                return
            fb.call_void(f"llvm.masked.store.{mangle(elem, lanes)}.p0",
                         [stored, ("ptr", f"ptr align {align} {address.ref}"), mask])
            return
        addresses = self.address(buffer, fb.broadcast(self.offset(buffer, indices), lanes))
        active = mask if mask is not None else Value("splat (i1 true)", "i1", lanes)
        fb.call_void(f"llvm.masked.scatter.{mangle(elem, lanes)}.{mangle('ptr', lanes)}",
                     [stored, (addresses.type, f"{addresses.type} align {align} "
                               f"{addresses.ref}"), active])
