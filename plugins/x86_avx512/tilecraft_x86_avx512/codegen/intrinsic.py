"""``IntrinsicCall`` to LLVM IR for the intrinsics the plugin declares (``intrinsics.yaml``).

Every declared intrinsic is a 16-lane operation on one zmm register: the destination holds one
element per lane (indexed by the spatial loop ``i1``); a source holds, for every lane, a group
of ``G`` elements (the extent of the reduce loop ``r1``, 1 when there is none) — its own group
when the source is indexed by ``i1`` (``Src2[i1, r1]``), the same group for every lane when it
is not (a broadcast: ``Src1[r1]``, ``Src1[0]``). The code generator reads these facts from the
declaration (operand shapes and index expressions), not from the intrinsic's name:

1. each source region becomes one ``<16*G x elem>`` vector in lane-major order: a vector load
   when the region is contiguous in that order, a load of the group and a ``shufflevector``
   splat when every lane reads the same contiguous group, and a ``llvm.masked.gather`` of
   per-element addresses for any other layout (a region stepping through a buffer with
   non-unit strides) — slower, never wrong;
2. the destination region is loaded the same way (accumulating intrinsics read it);
3. the LLVM intrinsic of :data:`LANE_INTRINSICS` combines them, and the result is stored back
   (a ``llvm.masked.scatter`` when the destination is not contiguous).

Offsets within a region are compile-time constants (region extents, steps and the buffer's
shape are static); only the region's base is computed at run time.

>>> [(d.name, lane_shape(d).lanes, lane_shape(d).group) for d in declared_intrinsics()][2:]
[('vpdpbusd', 16, 4), ('vdpbf16ps', 16, 2)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.intrin.generation import operand_dim_loops
from tilecraft.intrin.mapping import MappingError
from tilecraft.kernel_ir.nodes import IntrinsicCall, Region
from tilecraft.target.intrinsic import IntrinsicDecl, IntrinsicOperand
from tilecraft.te.expr import AxisKind
from tilecraft_x86_avx512.codegen.builder import Value
from tilecraft_x86_avx512.codegen.types import mangle, storage_type, vector_type
from tilecraft_x86_avx512.intrinsics import PLUGIN, declared_intrinsics

if TYPE_CHECKING:
    from tilecraft_x86_avx512.codegen.stmt import StmtEmitter


@dataclass(frozen=True)
class LaneIntrinsic:
    """The LLVM intrinsic behind a declared one; ``accumulator_first``: called as
    ``(Dst, Src1, Src2)`` (the dot products), else ``(Src1, Src2, Dst)`` (``llvm.fma``)."""

    llvm_name: str
    accumulator_first: bool


#: the LLVM intrinsic of every declared intrinsic (vpdpbusd: the first source is the unsigned
#: one, as Src1 is declared; dpbf16ps takes bfloat vectors, bitcast from the i16 storage)
LANE_INTRINSICS: dict[str, LaneIntrinsic] = {
    "fma_f32x16": LaneIntrinsic("llvm.fma.v16f32", accumulator_first=False),
    "fma_f32x16_bcast": LaneIntrinsic("llvm.fma.v16f32", accumulator_first=False),
    "vpdpbusd": LaneIntrinsic("llvm.x86.avx512.vpdpbusd.512", accumulator_first=True),
    "vdpbf16ps": LaneIntrinsic("llvm.x86.avx512bf16.dpbf16ps.512", accumulator_first=True),
}

#: the element type an LLVM intrinsic takes for a dtype, where it differs from the storage
_ARGUMENT_ELEMENT = {DType.BFLOAT16: "bfloat"}


def declaration(name: str) -> IntrinsicDecl:
    """The plugin's declaration of intrinsic ``name``, or a :class:`CodegenError` naming it
    and what the plugin generates."""
    for decl in declared_intrinsics():
        if decl.name == name and name in LANE_INTRINSICS:
            return decl
    raise CodegenError(
        f"the {PLUGIN} plugin cannot generate the intrinsic {name!r}: it generates "
        f"{', '.join(LANE_INTRINSICS)} (declared in its intrinsics.yaml); map the compute onto "
        "one of these or lower it without an intrinsic")


@dataclass(frozen=True)
class LaneShape:
    """The lane structure of a declaration: ``lanes`` (the destination's spatial loop) and
    ``group`` (the reduce loop's extent, 1 without one)."""

    lane_loop: str
    lanes: int
    group_loop: str | None
    group: int

    def offsets(self, decl: IntrinsicDecl, operand: IntrinsicOperand,
                strides: tuple[int, ...]) -> np.ndarray:
        """Element offsets from the region's base, ``[lane, group position]``."""
        dims = operand_dim_loops(decl)[operand.name]
        lane = np.arange(self.lanes)[:, None]
        position = np.arange(self.group)[None, :]
        total = np.zeros((self.lanes, self.group), dtype=np.int64)
        for index, stride in zip(dims, strides):
            if index == self.lane_loop:
                total = total + lane * stride
            elif index == self.group_loop:
                total = total + position * stride
            else:
                total = total + int(index) * stride
        return total


def lane_shape(decl: IntrinsicDecl) -> LaneShape:
    """Read the lane structure of ``decl``; a :class:`CodegenError` for declarations that are
    not one register of lanes with at most one reduce loop."""
    compute = decl.compute
    spatial = [loop for loop in compute.loops if loop.kind is AxisKind.SPATIAL]
    reduce = [loop for loop in compute.loops if loop.kind is AxisKind.REDUCE]
    destination = compute.destination
    if len(spatial) != 1 or len(reduce) > 1 or tuple(destination.index) != (spatial[0].name,):
        raise CodegenError(
            f"intrinsic {decl.name} of the {PLUGIN} plugin has loops "
            f"{[loop.name for loop in compute.loops]} and destination index "
            f"{list(destination.index)}; its code generator handles one spatial lane loop "
            "indexing the destination and at most one reduce loop")
    group = reduce[0] if reduce else None
    return LaneShape(spatial[0].name, spatial[0].extent, group.name if group else None,
                     group.extent if group else 1)


class IntrinsicCallEmitter:
    """Emits one ``IntrinsicCall`` (see the module docstring)."""

    def __init__(self, stmts: StmtEmitter, call: IntrinsicCall) -> None:
        self.stmts = stmts
        self.ctx = stmts.ctx
        self.fb = stmts.ctx.fb
        self.call = call
        try:
            self.decl = declaration(call.intrinsic)
            self.shape = lane_shape(self.decl)
        except CodegenError as err:
            raise self.ctx.error(str(err)) from None
        except MappingError as err:  # an index form the lanes cannot be read from
            raise self.ctx.error(f"intrinsic {call.intrinsic}: {err}") from None

    def emit(self) -> None:
        ctx, decl, call = self.ctx, self.decl, self.call
        if ctx.vector is not None:
            raise ctx.error(f"the intrinsic call {decl.name} is inside the vector loop over "
                            f"{ctx.vector.var.name}; an intrinsic is a whole vector operation: "
                            "make the enclosing loop SERIAL")
        operands = decl.compute.operands
        if len(call.operands) != len(operands):
            raise ctx.error(f"calls {decl.name} with {len(call.operands)} regions; it takes "
                            f"{len(operands)} ({', '.join(op.name for op in operands)})")
        values: dict[str, Value] = {}
        destination = decl.compute.destination
        for region, operand in zip(call.operands, operands):
            if operand.name != destination.name:
                values[operand.name] = self.load_source(region, operand)
        dst_region = call.operands[operands.index(destination)]
        dst_offsets = self.offsets(dst_region, destination)[:, 0]
        if len(set(dst_offsets.tolist())) != len(dst_offsets):
            raise ctx.error(f"the destination region of {decl.name} in "
                            f"{dst_region.buffer.name} sends two lanes to the same element "
                            f"(offsets {dst_offsets.tolist()}); give each lane its own element")
        elem = storage_type(destination.dtype)
        if decl.compute.accumulates:
            accumulator = self.load(dst_region, dst_offsets, elem)
        else:
            accumulator = Value("zeroinitializer", elem, self.shape.lanes)
        lane = LANE_INTRINSICS[decl.name]
        sources = [values[op.name] for op in decl.compute.sources]
        args = [accumulator, *sources] if lane.accumulator_first else [*sources, accumulator]
        result = self.fb.call(lane.llvm_name, elem, args, self.shape.lanes)
        self.store(dst_region, dst_offsets, result)

    # regions -----------------------------------------------------------------------------------
    def offsets(self, region: Region, operand: IntrinsicOperand) -> np.ndarray:
        buffer = region.buffer
        if buffer.dtype != operand.dtype:
            raise self.ctx.error(f"the {operand.name} operand of {self.decl.name} is a region of "
                                 f"{buffer.name} ({buffer.dtype.value}); it takes "
                                 f"{operand.dtype.value}: pack it into a buffer of that dtype")
        extra = len(region.extents) - operand.ndim
        if extra < 0 or any(e != 1 for e in region.extents[:extra]) \
                or tuple(region.extents[extra:]) != tuple(operand.shape) \
                or len(region.base) != buffer.ndim:
            raise self.ctx.error(
                f"the {operand.name} operand of {self.decl.name} is a region of extents "
                f"{list(region.extents)} of {buffer.name}{list(buffer.shape)}; it needs extents "
                f"{list(operand.shape)} (extra leading dimensions of extent 1 allowed) and a "
                "base index per buffer dimension")
        strides = tuple(s * step for s, step in zip(buffer.strides(), region.steps))[extra:]
        return self.shape.offsets(self.decl, operand, strides)

    def base_pointer(self, region: Region) -> str:
        memory = self.stmts.exprs.memory
        with self.ctx.uniform():
            return memory.address(region.buffer, memory.offset(region.buffer,
                                                               region.base)).ref

    def load_source(self, region: Region, operand: IntrinsicOperand) -> Value:
        """The source as one lane-major ``<lanes * group x elem>`` vector, in the element type
        the LLVM intrinsic takes."""
        offsets = self.offsets(region, operand)
        elem = storage_type(operand.dtype)
        group = self.shape.group
        contiguous_group = np.array_equal(offsets[0], np.arange(group))
        if contiguous_group and (offsets == offsets[0]).all() and self.shape.lanes > 1:
            loaded = self.load(region, offsets[0], elem)  # one group, splat to every lane
            count = offsets.size
            mask = ", ".join(f"i32 {k % group}" for k in range(count))
            vec = vector_type(elem, group)
            splat = self.fb.define(f"shufflevector {vec} {loaded.ref}, {vec} poison, "
                                   f"<{count} x i32> <{mask}>", "splat")
            value = Value(splat, elem, count)
        else:
            value = self.load(region, offsets.reshape(-1), elem)
        wanted = _ARGUMENT_ELEMENT.get(operand.dtype)
        return self.fb.convert("bitcast", value, wanted) if wanted else value

    def load(self, region: Region, offsets: np.ndarray, elem: str) -> Value:
        """The elements at ``offsets`` from the region's base, as a vector."""
        fb, count = self.fb, len(offsets)
        align = region.buffer.dtype.bytes
        base = self.base_pointer(region)
        vec = vector_type(elem, count)
        if np.array_equal(offsets, np.arange(count)):
            return Value(fb.define(f"load {vec}, ptr {base}, align {align}", "vld"), elem, count)
        addresses = self.addresses(base, offsets, elem)
        name = f"llvm.masked.gather.{mangle(elem, count)}.{mangle('ptr', count)}"
        return fb.call(name, elem, [(addresses.type, f"{addresses.type} align {align} "
                                     f"{addresses.ref}"),
                                    Value("splat (i1 true)", "i1", count),
                                    Value("poison", elem, count)], count)

    def store(self, region: Region, offsets: np.ndarray, value: Value) -> None:
        fb, count = self.fb, len(offsets)
        align = region.buffer.dtype.bytes
        base = self.base_pointer(region)
        if np.array_equal(offsets, np.arange(count)):
            fb.emit(f"store {value.typed}, ptr {base}, align {align}")
            return
        addresses = self.addresses(base, offsets, value.elem)
        fb.call_void(f"llvm.masked.scatter.{mangle(value.elem, count)}.{mangle('ptr', count)}",
                     [value, (addresses.type, f"{addresses.type} align {align} "
                              f"{addresses.ref}"), Value("splat (i1 true)", "i1", count)])

    def addresses(self, base: str, offsets: np.ndarray, elem: str) -> Value:
        count = len(offsets)
        constants = ", ".join(f"i64 {int(o)}" for o in offsets)
        reg = self.fb.define(f"getelementptr {elem}, ptr {base}, <{count} x i64> <{constants}>",
                             "addrs")
        return Value(reg, "ptr", count)


def emit_intrinsic_call(stmts: StmtEmitter, call: IntrinsicCall) -> None:
    """Emit ``call`` (an intrinsic of the plugin's declarations) at the current position."""
    IntrinsicCallEmitter(stmts, call).emit()


def check_intrinsic_call(call: IntrinsicCall, where: str) -> None:
    """Refuse, before emitting anything, a call of an intrinsic the plugin cannot generate."""
    try:
        lane_shape(declaration(call.intrinsic))
    except CodegenError as err:
        raise CodegenError(f"{PLUGIN} cannot generate the IntrinsicCall in {where}: {err}") \
            from None
