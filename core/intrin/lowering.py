"""Lowering a compute through a physical mapping (thesis §5.4, Fig. 5.2 h): the Kernel IR
kernel that computes it with the intrinsic, for any target's code generator (and the
interpreter, which runs each call by the intrinsic's declared semantics).

The kernel packs every source into zero-padded, tile-after-tile buffers laid out as
:mod:`.generation` says, calls the intrinsic once per tile combination, and unpacks the
destination tiles into the compute's output::

    allocate Dst_tiles, Src_tiles (zeros: the padding of the ragged edges stays zero)
    pack the sources that use no outer loop (hoisted: packed once)
    for the outer spatial loops:
        Dst_tiles = 0
        pack the sources whose outer loops are bound by now
        for the outer reduce loops:
            pack the sources using them
            for every tile T: intrinsic(Src1_tiles[tile T], ..., Dst_tiles[tile T])
        unpack: out[software index of v] = Dst_tiles[position(v)]

A source is packed as soon as the outer loops it reads are bound, so that a GEMM's ``B``
(which no outer loop indexes) is packed once, not once per row. Packing writes the positions
of the virtual problem only, so the padding the buffers are allocated with stays zero. An
intrinsic that overwrites its destination (``Dst = sum(...)``) writes a partial tile that is
added into the destination tiles. Every loop is SERIAL: the kernel is correct on every
target; the hand-written micro-kernels stay the fast path.

>>> from tilecraft import te, ops
>>> from tilecraft.intrin import generate, match
>>> from tilecraft.intrin.examples import wmma
>>> from tilecraft.lower import LoweringOptions
>>> A = te.placeholder((2, 3), "float16", name="A")
>>> B = te.placeholder((3, 2), "float16", name="B")
>>> C = ops.matmul(A, B, out_dtype="float32", name="C")
>>> mma = wmma(16, 16, 16)
>>> (kernel,) = lower_mapped(C, generate(C, mma, match(C, mma).mappings[0]), LoweringOptions())
>>> [b.name for b in kernel.params], kernel.attrs["intrinsic"]
(['A', 'B', 'C'], 'wmma_16x16x16')
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from tilecraft.errors import LoweringError
from tilecraft.intrin.access import SoftwareOperand
from tilecraft.intrin.generation import OperandLayout, PhysicalMapping
from tilecraft.intrin.mapping import MappingError, Reason, ReasonKind
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IntrinsicCall,
    Kernel,
    LoopKind,
    Region,
    Seq,
    Stmt,
    Store,
)
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.intrinsic import OperandRole
from tilecraft.target.spec import TargetSpec
from tilecraft.te.expr import AxisKind, Const, Expr, IterVar, Load, ReduceOp, Var
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import transform, vars_in


def _serial(var: Var, extent: int, body: Stmt) -> Stmt:
    return For(var, Const(extent, var.dtype), LoopKind.SERIAL, body)


def _sequence(stmts: Sequence[Stmt]) -> Stmt:
    return stmts[0] if len(stmts) == 1 else Seq(tuple(stmts))


class MappedKernelBuilder:
    """Builds the kernel of one physical mapping (see the module docstring)."""

    def __init__(self, physical: PhysicalMapping, options: LoweringOptions):
        self.physical = physical
        self.options = options
        virtual = physical.virtual
        self.virtual = virtual
        self.decl = virtual.intrinsic
        self.product = virtual.product
        compute = self.product.compute
        level = options.param_level
        self.params: dict[str, Buffer] = {}
        for factor in self.product.factors:
            tensor = factor.tensor
            self.params.setdefault(tensor.name, Buffer(tensor.name, tensor.shape, tensor.dtype,
                                                       level=level))
        self.output = Buffer(compute.name, compute.shape, compute.dtype, level=level)
        self.outer = {loop: Var(loop.name) for loop in virtual.outer}
        self.tiles = {layout.operand: Buffer(f"{layout.operand}_tiles", layout.buffer_shape,
                                             layout.dtype, level=layout.level)
                      for layout in physical.layouts}

    # element-wise parts ----------------------------------------------------------------------
    def _software_values(self, layout: OperandLayout,
                         positions: Mapping[str, Var]) -> dict[IterVar, Expr]:
        values: dict[IterVar, Expr] = dict(self.outer)
        for name in layout.loop_dims:
            values.update(self.virtual.loop(name).split(positions[name]))
        return values

    def _nest(self, layout: OperandLayout, positions: dict[str, Var], body: Stmt) -> Stmt:
        for name in reversed(layout.loop_dims):
            body = _serial(positions[name], self.virtual.loop(name).extent, body)
        return body

    def _lower(self, expr: Expr, values: Mapping[IterVar, Expr], operand: str) -> Expr:
        def replace(node: Expr) -> Expr | None:
            if isinstance(node, Load):
                buffer = self.params[node.tensor.name]
                return BufferLoad(buffer, tuple(self._lower(i, values, operand)
                                                for i in node.indices))
            if isinstance(node, IterVar):
                if node not in values:
                    message = (f"loop {node.name} is used by the operand {operand} but is "
                               f"neither outside the intrinsic nor on one of its loops")
                    raise MappingError(message, [Reason(ReasonKind.UNSUPPORTED, message,
                                                        operand=operand,
                                                        software_loop=node.name)])
                return values[node]
            return None

        return transform(expr, replace)

    def _factor(self, layout: OperandLayout) -> SoftwareOperand:
        position = self.virtual.mapping.binding(layout.operand).factor
        assert position is not None
        return self.product.factors[position]

    def outer_loops_of(self, layout: OperandLayout) -> frozenset[IterVar]:
        """The outer loops a source's packed values depend on."""
        used = {v for v in vars_in(self._factor(layout).value()) if isinstance(v, IterVar)}
        return frozenset(loop for loop in self.virtual.outer if loop in used)

    def pack(self, layout: OperandLayout) -> Stmt:
        positions = {name: Var(f"v_{name}") for name in layout.loop_dims}
        values = self._software_values(layout, positions)
        value = self._lower(self._factor(layout).value(), values, layout.operand)
        store = Store(self.tiles[layout.operand], layout.position(positions), value)
        return self._nest(layout, positions, store)

    def unpack(self, layout: OperandLayout) -> Stmt:
        positions = {name: Var(f"v_{name}") for name in layout.loop_dims}
        values = self._software_values(layout, positions)
        index = tuple(values[axis] for axis in self.product.axes)
        value: Expr = BufferLoad(self.tiles[layout.operand], layout.position(positions))
        if value.dtype != self.output.dtype:
            value = value.astype(self.output.dtype)
        return self._nest(layout, positions, Store(self.output, index, value))

    def clear(self, buffer: Buffer) -> Stmt:
        """``buffer = 0``, element by element."""
        local = [Var(f"z{d}") for d in range(buffer.ndim)]
        zero = Const(0, buffer.dtype) if buffer.dtype.is_int else Const(0.0, buffer.dtype)
        body: Stmt = Store(buffer, tuple(local), zero)
        for var, extent in reversed(list(zip(local, buffer.shape))):
            body = _serial(var, extent, body)
        return body

    # the intrinsic calls ---------------------------------------------------------------------
    def calls(self) -> Stmt:
        tile_vars = dict(self.physical.tile_vars)
        regions = []
        destination = self.decl.compute.destination.name
        partial: Buffer | None = None
        for layout in self.physical.layouts:
            buffer = self.tiles[layout.operand]
            base = layout.region_base(tile_vars)
            if layout.operand == destination and not self.decl.compute.accumulates:
                partial = Buffer(f"{layout.operand}_partial", layout.tile_shape, layout.dtype,
                                 level=layout.moves[0].move.from_level)
                buffer, base = partial, tuple(Const(0, b.dtype) for b in base)
            regions.append(Region(buffer, base, layout.tile_shape))
        body: Stmt = IntrinsicCall(self.decl.name, tuple(regions),
                                   (("mapping", str(self.virtual.mapping)),))
        if partial is not None:
            body = Allocate(partial, Seq((body, self._accumulate(partial, tile_vars))))
        loops = sorted(self.virtual.loops, key=lambda loop: loop.kind is not AxisKind.SPATIAL)
        for loop in reversed(loops):
            body = _serial(tile_vars[loop.name], loop.tiles, body)
        return body

    def _accumulate(self, partial: Buffer, tile_vars: Mapping[str, Var]) -> Stmt:
        """``Dst_tiles[tile] += partial`` for an intrinsic that overwrites its destination."""
        layout = self.physical.layout(self.decl.compute.destination.name)
        local = [Var(f"l{d}") for d in range(len(layout.tile_shape))]
        base = layout.region_base(tile_vars)
        target = (base[0] + local[0], *local[1:])
        body: Stmt = Store(self.tiles[layout.operand], target,
                           BufferLoad(partial, tuple(local)), ReduceOp.SUM)
        for var, extent in reversed(list(zip(local, layout.tile_shape))):
            body = _serial(var, extent, body)
        return body

    # the kernel ------------------------------------------------------------------------------
    def _outer_order(self) -> tuple[list[IterVar], list[IterVar]]:
        """The outer loops, spatial ones first (outermost first), and the spatial ones."""
        spatial_outer = [loop for loop in self.virtual.outer if loop in self.product.axes]
        reduce_outer = [loop for loop in self.virtual.outer if loop not in self.product.axes]
        return spatial_outer + reduce_outer, spatial_outer

    def _pack_depths(self) -> dict[str, int]:
        """Per source: how many outer loops enclose its packing (a source is packed right
        inside the innermost outer loop it uses; 0: outside them all, packed once)."""
        order, _ = self._outer_order()
        return {layout.operand: max((order.index(loop) + 1
                                     for loop in self.outer_loops_of(layout)), default=0)
                for layout in self.physical.layouts if layout.role is OperandRole.SRC}

    def copied_elements(self) -> int:
        """Elements the kernel's element-by-element loops store, all iterations counted:
        the packing of every source, the clearing of the destination tiles and their
        unpacking into the output — the work around the intrinsic calls.

        >>> from tilecraft import te, ops
        >>> from tilecraft.intrin import generate, match
        >>> from tilecraft.intrin.examples import wmma
        >>> A = te.placeholder((2, 3), "float16", name="A")
        >>> B = te.placeholder((3, 2), "float16", name="B")
        >>> C = ops.matmul(A, B, out_dtype="float32", name="C")
        >>> mma = wmma(16, 16, 16)
        >>> MappedKernelBuilder(generate(C, mma, match(C, mma).mappings[0]),
        ...                     LoweringOptions()).copied_elements()  # 6 + 6 + 256 + 4
        272
        """
        order, spatial_outer = self._outer_order()
        depths = self._pack_depths()

        def packed(layout: OperandLayout) -> int:
            return math.prod(self.virtual.loop(name).extent for name in layout.loop_dims)

        total = 0
        for layout in self.physical.layouts:
            if layout.role is OperandRole.SRC:
                rounds = math.prod(loop.extent for loop in order[:depths[layout.operand]])
                total += rounds * packed(layout)
            else:
                rounds = math.prod(loop.extent for loop in spatial_outer)
                total += rounds * (math.prod(layout.buffer_shape) + packed(layout))
        return total

    def kernel(self, name: str) -> Kernel:
        layouts = self.physical.layouts
        sources = [layout for layout in layouts if layout.role is OperandRole.SRC]
        destination = next(layout for layout in layouts if layout.role is OperandRole.DST)
        order, spatial_outer = self._outer_order()
        depth = self._pack_depths()

        def packs(level: int) -> list[Stmt]:
            return [self.pack(layout) for layout in sources if depth[layout.operand] == level]

        inner: Stmt = self.calls()
        for level in range(len(order), len(spatial_outer), -1):
            loop = order[level - 1]
            inner = _serial(self.outer[loop], loop.extent, _sequence([*packs(level), inner]))
        body: Stmt = _sequence([self.clear(self.tiles[destination.operand]),
                                *packs(len(spatial_outer)), inner, self.unpack(destination)])
        for level in range(len(spatial_outer), 0, -1):
            loop = order[level - 1]
            body = _serial(self.outer[loop], loop.extent,
                           _sequence([*(packs(level) if level < len(spatial_outer) else ()),
                                      body]))
        body = _sequence([*(packs(0) if spatial_outer else ()), body])
        for layout in reversed(layouts):
            body = Allocate(self.tiles[layout.operand], body)
        params = (*self.params.values(), self.output)
        return Kernel(name, params, (self.output.name,), body,
                      attrs={"mapping": str(self.virtual.mapping),
                             "intrinsic": self.decl.name,
                             "schedule": f"tensorized: {self.virtual.mapping}"})


def lower_mapped(compute: Tensor, physical: PhysicalMapping, options: LoweringOptions,
                 name: str | None = None) -> list[Kernel]:
    """The kernels computing ``compute`` through ``physical`` (one kernel: its parameters are
    the tensors the product loads, then the compute's output). ``options`` give the memory
    level of the parameters; a ``physical`` mapping of another compute is refused."""
    mapped = physical.virtual.product.compute
    if mapped is not compute and mapped.name != compute.name:
        raise LoweringError(f"the physical mapping is of compute {mapped.name}, not "
                            f"{compute.name}; generate one for {compute.name}")
    builder = MappedKernelBuilder(physical, options)
    return [builder.kernel(name or f"{compute.name}_{physical.virtual.intrinsic.name}")]


def serial_view(spec: TargetSpec) -> TargetSpec:
    """``spec`` as the kernels of :func:`lower_mapped` use it: their loops are all SERIAL, so
    they run on one core, through one instance of every memory level — ``spec`` with one core
    and no fan-out, on which a cost model predicts the kernel that is generated (and not one
    whose loops would be spread over the units).

    >>> from tilecraft.intrin.perfmodel import gpu_spec_example
    >>> spec = gpu_spec_example()
    >>> view = serial_view(spec)
    >>> spec.compute.cores, [level.fan_out for level in spec.memory.levels]
    (8, [8, 4, 1])
    >>> view.compute.cores, [level.fan_out for level in view.memory.levels]
    (1, [1, 1, 1])
    """
    levels = tuple(level.model_copy(update={"fan_out": 1}) for level in spec.memory.levels)
    return spec.model_copy(update={
        "memory": spec.memory.model_copy(update={"levels": levels}),
        "compute": spec.compute.model_copy(update={"cores": 1})})
