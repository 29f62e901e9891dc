"""Executing a physical mapping: a Kernel IR kernel whose inner part is ``IntrinsicCall``s on
zero-padded operand tiles, run by the Kernel IR interpreter, which executes each call by the
intrinsic's declared semantics. It is the proof that a verified mapping computes what the
compute computes (lowering mapped loops inside the general pipeline is a separate step).

The kernel, for each iteration of the software loops left outside the intrinsic::

    allocate Dst_tiles (zeros), Src_tiles (zeros)       # packed tile by tile (generation.py)
    for the outer reduce loops:
        pack each source: Src_tiles[position(v)] = tensor[software index of v]
        for every tile T: intrinsic(Src1_tiles[tile T], ..., Dst_tiles[tile T])
    unpack: out[software index of v] = Dst_tiles[position(v)]

>>> import numpy as np
>>> from tilecraft import te, ops
>>> from tilecraft.intrin import generate, match
>>> from tilecraft.intrin.examples import wmma
>>> A = te.placeholder((2, 2), "float16", name="A")
>>> B = te.placeholder((2, 2), "float16", name="B")
>>> C = ops.matmul(A, B, out_dtype="float32", name="C")
>>> mma = wmma(16, 16, 16)
>>> physical = generate(C, mma, match(C, mma).mappings[0])
>>> a = np.array([[1, 2], [3, 4]], np.float16)
>>> execute(physical, {"A": a, "B": a})
array([[ 7., 10.],
       [15., 22.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tilecraft.errors import InputError
from tilecraft.intrin.generation import OperandLayout, PhysicalMapping
from tilecraft.intrin.mapping import MappingError, Reason, ReasonKind
from tilecraft.kernel_ir.interpreter import run_kernel
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
from tilecraft.target.intrinsic import OperandRole
from tilecraft.te.expr import AxisKind, Const, Expr, IterVar, Load, ReduceOp, Var
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import transform


class _KernelBuilder:
    def __init__(self, physical: PhysicalMapping):
        self.physical = physical
        virtual = physical.virtual
        self.virtual = virtual
        self.decl = virtual.intrinsic
        self.product = virtual.product
        compute = self.product.compute
        self.params: dict[str, Buffer] = {}
        for factor in self.product.factors:
            tensor = factor.tensor
            self.params.setdefault(tensor.name, Buffer(tensor.name, tensor.shape, tensor.dtype))
        self.output = Buffer(compute.name, compute.shape, compute.dtype)
        self.outer = {loop: Var(loop.name) for loop in virtual.outer}
        self.tiles = {layout.operand: Buffer(f"{layout.operand}_tiles", layout.buffer_shape,
                                             layout.dtype, level=layout.level)
                      for layout in physical.layouts}

    def _software_values(self, layout: OperandLayout,
                         positions: Mapping[str, Var]) -> dict[IterVar, Expr]:
        values: dict[IterVar, Expr] = dict(self.outer)
        for name in layout.dim_loops:
            values.update(self.virtual.loop(name).split(positions[name]))
        return values

    def _nest(self, layout: OperandLayout, positions: dict[str, Var], body: Stmt) -> Stmt:
        for name in reversed(layout.dim_loops):
            extent = self.virtual.loop(name).extent
            body = For(positions[name], Const(extent, positions[name].dtype), LoopKind.SERIAL,
                       body)
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

    def pack(self, layout: OperandLayout) -> Stmt:
        factor_position = self.virtual.mapping.binding(layout.operand).factor
        assert factor_position is not None
        factor = self.product.factors[factor_position]
        positions = {name: Var(f"v_{name}") for name in layout.dim_loops}
        values = self._software_values(layout, positions)
        value = self._lower(factor.value(), values, layout.operand)
        store = Store(self.tiles[layout.operand], layout.position(positions), value)
        return self._nest(layout, positions, store)

    def unpack(self, layout: OperandLayout) -> Stmt:
        positions = {name: Var(f"v_{name}") for name in layout.dim_loops}
        values = self._software_values(layout, positions)
        index = tuple(values[axis] for axis in self.product.axes)
        value: Expr = BufferLoad(self.tiles[layout.operand], layout.position(positions))
        if value.dtype != self.output.dtype:
            value = value.astype(self.output.dtype)
        return self._nest(layout, positions, Store(self.output, index, value))

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
            var = tile_vars[loop.name]
            body = For(var, Const(loop.tiles, var.dtype), LoopKind.SERIAL, body)
        return body

    def _accumulate(self, partial: Buffer, tile_vars: Mapping[str, Var]) -> Stmt:
        """``Dst_tiles[tile] += partial`` for an intrinsic that overwrites its destination."""
        layout = self.physical.layout(self.decl.compute.destination.name)
        local = [Var(f"l_{name}") for name in layout.dim_loops]
        base = layout.region_base(tile_vars)
        target = (base[0] + local[0], *local[1:])
        body: Stmt = Store(self.tiles[layout.operand], target,
                           BufferLoad(partial, tuple(local)), ReduceOp.SUM)
        for var, extent in reversed(list(zip(local, layout.tile_shape))):
            body = For(var, Const(extent, var.dtype), LoopKind.SERIAL, body)
        return body

    def kernel(self, name: str) -> Kernel:
        layouts = self.physical.layouts
        sources = [layout for layout in layouts if layout.role is OperandRole.SRC]
        destination = next(layout for layout in layouts if layout.role is OperandRole.DST)
        inner: Stmt = Seq((*(self.pack(layout) for layout in sources), self.calls()))
        reduce_outer = [loop for loop in self.virtual.outer if loop not in self.product.axes]
        spatial_outer = [loop for loop in self.virtual.outer if loop in self.product.axes]
        for loop in reversed(reduce_outer):
            var = self.outer[loop]
            inner = For(var, Const(loop.extent, var.dtype), LoopKind.SERIAL, inner)
        body: Stmt = Seq((inner, self.unpack(destination)))
        for layout in reversed(layouts):
            body = Allocate(self.tiles[layout.operand], body)
        for loop in reversed(spatial_outer):
            var = self.outer[loop]
            body = For(var, Const(loop.extent, var.dtype), LoopKind.SERIAL, body)
        params = (*self.params.values(), self.output)
        return Kernel(name, params, (self.output.name,), body,
                      attrs={"mapping": str(self.virtual.mapping),
                             "intrinsic": self.decl.name})


def build_kernel(physical: PhysicalMapping, name: str | None = None) -> Kernel:
    """The Kernel IR kernel executing ``physical`` (parameters: the tensors the product
    loads, then the compute's output)."""
    builder = _KernelBuilder(physical)
    return builder.kernel(name or f"{physical.virtual.product.compute.name}_"
                                  f"{physical.virtual.intrinsic.name}")


def _loaded_arrays(tensors: list[Tensor], inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    from tilecraft.graph import Graph
    from tilecraft.reference import run

    computes = [t for t in tensors if not t.is_placeholder]
    arrays: dict[str, Any] = {}
    for tensor in tensors:
        if tensor.is_placeholder:
            if tensor.name not in inputs:
                raise InputError(f"input {tensor.name!r} is missing; pass a "
                                 f"{tensor.dtype.value}{list(tensor.shape)} array")
            arrays[tensor.name] = inputs[tensor.name]
    if computes:
        needed = {t.name for t in Graph.from_outputs(computes).inputs}
        values = run(computes, {k: v for k, v in inputs.items() if k in needed})
        values = values if isinstance(values, tuple) else (values,)
        arrays.update({t.name: v for t, v in zip(computes, values)})
    return arrays


def execute(physical: PhysicalMapping, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """Run the mapped kernel on ``inputs`` (placeholder arrays by name) and return the
    compute's output. Tensors the product reads through other computes (a ``pad``) are
    evaluated first with the reference interpreter."""
    product = physical.virtual.product
    kernel = build_kernel(physical)
    tensors = list({id(f.tensor): f.tensor for f in product.factors}.values())
    arrays = _loaded_arrays(tensors, inputs)
    output = product.compute
    arrays[output.name] = np.zeros(output.shape, output.dtype.numpy)
    decl = physical.virtual.intrinsic
    run_kernel(kernel, arrays, semantics={decl.name: decl.reference})
    return arrays[output.name]
