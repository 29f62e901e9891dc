"""Computes tensorized onto ``arm_dot`` / ``arm_dot_acc`` through a verified AMOS mapping
(thesis §5.4-5.6), lowered for a Mali GPU: one work-item per output element, its reduction
in steps of the intrinsic's four int8 lanes on private registers.

The core's AMOS stages find and verify the mapping (which software loops fuse onto the
intrinsic's reduce loop ``r1``, which tensors are ``Src1`` / ``Src2``); this module only
decides where the loops run::

    for group in bound(ceil(points / WG), axis=group_id.x):
      for item in bound(WG, axis=local_id.x):
        if group * WG + item < points:            # one output point per work-item
          (n, k, h, w) = unflatten(group * WG + item)
          int acc[1] = 0
          for the reduce loops outside the mapping (serial):
            for t in serial(ceil(R / 4)):          # R: the fused extent of r1
              char a[4], b[4]: element l is Src1 / Src2 at r1 = 4 t + l (0 past R)
              arm_dot_acc(a, b, acc)               # arm_dot_acc(vload4(a), vload4(b), acc)
          out[n, k, h, w] = acc[0]

(``arm_dot``, which overwrites its destination, writes a private partial that is added into
``acc``.) Mappings of other shapes (a destination tile wider than one element, several
reduce loops, an operand indexed by a spatial intrinsic loop) are left to the core's serial
lowering (``None``).

>>> from tilecraft import ops, te
>>> from tilecraft.intrin import generate, match
>>> from tilecraft.lower import LoweringOptions
>>> from tilecraft_mali.target import load_target_spec
>>> spec = load_target_spec()
>>> A = te.placeholder((5, 7), "int8", name="A")
>>> B = te.placeholder((7, 3), "int8", name="B")
>>> C = ops.matmul(A, B, out_dtype="int32", name="C")
>>> dot = spec.intrinsic("arm_dot_acc")
>>> [kernel] = lower_dot_mapping(C, generate(C, dot, match(C, dot).mappings[0]),
...                              LoweringOptions.from_spec(spec))
>>> kernel.launch.grid, kernel.launch.block, kernel.attrs["intrinsic"]
((1,), (15,), 'arm_dot_acc')
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tilecraft.intrin.generation import PhysicalMapping
from tilecraft.intrin.operands import operand_value
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    IntrinsicCall,
    Kernel,
    LaunchConfig,
    LoopKind,
    Region,
    Seq,
    Stmt,
    Store,
)
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.intrinsic import IntrinsicDecl
from tilecraft.te import functions as tf
from tilecraft.te.expr import AxisKind, Const, Expr, IterVar, ReduceOp, Var, const
from tilecraft.te.tensor import Tensor

__all__ = ["WORK_GROUP_ITEMS", "lower_dot_mapping", "supports"]

#: work-items per work-group (a multiple of the G76's 8-wide warps, well under its 384)
WORK_GROUP_ITEMS = 64


def supports(intrinsic: IntrinsicDecl) -> bool:
    """Whether ``intrinsic`` has the shape this lowering handles: a one-element destination,
    one reduce loop, sources indexed by that loop only (``arm_dot``, ``arm_dot_acc``)."""
    compute = intrinsic.compute
    reduce = [loop for loop in compute.loops if loop.kind is AxisKind.REDUCE]
    if len(reduce) != 1 or math.prod(compute.destination.shape) != 1:
        return False
    return all(tuple(source.index) == (reduce[0].name,) for source in compute.sources)


def _block(stmts: list[Stmt]) -> Stmt:
    return stmts[0] if len(stmts) == 1 else Seq(tuple(stmts))


def _unflatten(flat: Expr, axes: tuple[IterVar, ...]) -> dict[IterVar, Expr]:
    """Row-major coordinates of ``flat`` over ``axes`` (the last axis fastest)."""
    values: dict[IterVar, Expr] = {}
    stride = 1
    for axis in reversed(axes):
        value = flat // stride if stride != 1 else flat
        values[axis] = value % axis.extent if axis is not axes[0] else value
        stride *= axis.extent
    return values


class _DotKernelBuilder:
    """The kernel of one mapping onto a dot-product intrinsic (module docstring)."""

    def __init__(self, compute: Tensor, physical: PhysicalMapping,
                 options: LoweringOptions) -> None:
        virtual = physical.virtual
        self.compute = compute
        self.virtual = virtual
        self.decl = virtual.intrinsic
        self.product = virtual.product
        level = options.param_level
        self.params: dict[str, Buffer] = {}
        for factor in self.product.factors:
            tensor = factor.tensor
            self.params.setdefault(tensor.name, Buffer(tensor.name, tensor.shape, tensor.dtype,
                                                       level=level))
        self.output = Buffer(compute.name, compute.shape, compute.dtype, level=level)
        self.private = options.register_level or "private"
        [self.reduce] = [loop for loop in virtual.loops if loop.kind is AxisKind.REDUCE]
        self.lanes = self.reduce.tile

    def _value(self, operand: str, values: Mapping[IterVar, Expr]) -> Expr:
        """The source ``operand``'s element at the software loop values ``values``."""
        return operand_value(self.virtual, self.params, operand, values)

    def _gather(self, buffer: Buffer, operand: str, tile: Var,
                values: Mapping[IterVar, Expr]) -> Stmt:
        """``buffer[l] = operand at r1 = lanes * tile + l`` for every lane, 0 past the end."""
        lane = Var(f"{operand.lower()}_lane")
        position = tile * self.lanes + lane
        padded = self.reduce.padded_extent != self.reduce.extent
        inner = dict(values)
        # lanes past the end are zero (guard below); the clamp tells the bounds checker so
        inner.update(self.reduce.split(tf.min(position, const(self.reduce.extent - 1))
                                       if padded else position))
        value = self._value(operand, inner)
        zero = Const(0, buffer.dtype)
        store: Stmt = Store(buffer, (lane,), value.astype(buffer.dtype)
                            if value.dtype != buffer.dtype else value)
        if padded:
            store = Seq((Store(buffer, (lane,), zero),
                         IfThenElse(position < self.reduce.extent, store)))
        return For(lane, const(self.lanes), LoopKind.UNROLLED, store)

    def _step(self, accumulator: Buffer, values: Mapping[IterVar, Expr]) -> Stmt:
        """The serial loop over the ``r1`` tiles: gather both sources, call the intrinsic."""
        compute = self.decl.compute
        tile = Var("r1_tile")
        sources = {op.name: Buffer(f"{op.name.lower()}_lanes", (self.lanes,), op.dtype,
                                   level=self.private) for op in compute.sources}
        partial = None if compute.accumulates else Buffer(
            "dot_partial", (1,), compute.destination.dtype, level=self.private)
        regions = []
        for operand in compute.operands:
            if operand.name in sources:
                regions.append(Region(sources[operand.name], (const(0),), (self.lanes,)))
            else:
                regions.append(Region(partial or accumulator, (const(0),), (1,)))
        call: Stmt = IntrinsicCall(self.decl.name, tuple(regions),
                                   (("mapping", str(self.virtual.mapping)),))
        if partial is not None:
            call = Allocate(partial, Seq((call, Store(
                accumulator, (const(0),), BufferLoad(partial, (const(0),)), ReduceOp.SUM))))
        body: Stmt = Seq((*(self._gather(buffer, name, tile, values)
                            for name, buffer in sources.items()), call))
        for buffer in sources.values():
            body = Allocate(buffer, body)
        return For(tile, const(self.reduce.tiles), LoopKind.SERIAL, body)

    def kernel(self, name: str) -> Kernel:
        axes = tuple(self.product.axes)
        points = math.prod(axis.extent for axis in axes)
        items = min(WORK_GROUP_ITEMS, points)
        groups = -(-points // items)
        group, item = Var("group"), Var("item")
        flat = group * items + item
        # the guard below keeps flat < points; the clamp tells the bounds checker so
        point = flat if groups * items == points else tf.min(flat, const(points - 1))
        values: dict[IterVar, Expr] = _unflatten(point, axes)
        accumulator = Buffer("acc", (1,), self.decl.compute.destination.dtype,
                             level=self.private)
        outer_reduce = [loop for loop in self.virtual.outer if loop.kind is AxisKind.REDUCE]
        loop_vars = {loop: Var(loop.name) for loop in outer_reduce}
        values.update(loop_vars)
        body: Stmt = self._step(accumulator, values)
        for loop in reversed(outer_reduce):
            body = For(loop_vars[loop], const(loop.extent), LoopKind.SERIAL, body)
        result: Expr = BufferLoad(accumulator, (const(0),))
        if result.dtype != self.output.dtype:
            result = result.astype(self.output.dtype)
        zero = Const(0, accumulator.dtype) if accumulator.dtype.is_int else Const(
            0.0, accumulator.dtype)
        work = Allocate(accumulator, _block([
            Store(accumulator, (const(0),), zero), body,
            Store(self.output, tuple(values[axis] for axis in axes), result)]))
        if groups * items != points:
            work = IfThenElse(flat < points, work)
        nest = For(group, const(groups), LoopKind.BOUND,
                   For(item, const(items), LoopKind.BOUND, work, axis="local_id.x"),
                   axis="group_id.x")
        params = (*self.params.values(), self.output)
        return Kernel(name, params, (self.output.name,), nest,
                      launch=LaunchConfig(grid=(groups,), block=(items,)),
                      attrs={"mapping": str(self.virtual.mapping),
                             "intrinsic": self.decl.name, "strategy": "mali_dot",
                             "schedule": f"tensorized: {self.virtual.mapping} (one work-item "
                                         f"per output element, {items} per work-group)"})


def lower_dot_mapping(compute: Tensor, physical: PhysicalMapping,
                      options: LoweringOptions) -> list[Kernel] | None:
    """The work-item-parallel kernel of ``compute`` through ``physical`` (module docstring),
    or ``None`` when the mapping's intrinsic does not have the shape handled here or is not
    of ``compute``."""
    if not supports(physical.virtual.intrinsic) \
            or physical.virtual.product.compute.name != compute.name:
        return None
    kernel = _DotKernelBuilder(compute, physical, options).kernel(
        f"{compute.name}_{physical.virtual.intrinsic.name}")
    if options.spec is not None:
        from tilecraft.kernel_ir.verify import verify_kernel

        verify_kernel(kernel, options.spec)
    return [kernel]
