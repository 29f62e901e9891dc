"""Emitting the statements of one kernel: its root stage and the stages computed inside it.

For each stage: derive its loops' extents (over the region it computes when attached), give
each leaf loop a variable, recompute every axis from the leaves, add guards for overshooting
splits and region tails, then build the nest. A reduction is lowered as by
:mod:`tilecraft.lower.compute`: the loops before the first reduce leaf enclose an
initialisation over the spatial loops inside it and the accumulation over all inner loops
(half-precision outputs accumulate in a float32 local buffer). Stages attached at a leaf are
emitted at the top of its body, into local buffers, their region found by bound inference
(:mod:`.region`).

An index the Kernel IR verifier cannot prove inside its buffer — typically a fused loop over a
split with a tail, whose guard is not affine — is clamped into the buffer: the clamp never
changes an element that is used, as the guards only let in-bounds iterations through.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    Copy,
    LoopKind,
    Region,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.lower.guards import clamp_guarded_loads
from tilecraft.lower.options import LoweringOptions
from tilecraft.schedule.emit_dataflow import DataflowEmission
from tilecraft.schedule.emit_threads import CrossThreadReduction
from tilecraft.schedule.errors import schedule_error
from tilecraft.schedule.loop import Guard, derive_extents, derive_values
from tilecraft.schedule.nest import Leaf, Scope, build_nest, no_attach, seq
from tilecraft.schedule.region import Region as ProducerRegion
from tilecraft.schedule.region import infer_region
from tilecraft.schedule.stage import Stage
from tilecraft.schedule.target import TargetView
from tilecraft.te.bounds import index_in_bounds, interval, prove_nonnegative
from tilecraft.te.expr import (
    AxisKind,
    Binary,
    BinaryOp,
    Const,
    Expr,
    IterVar,
    Load,
    Reduce,
    ReduceOp,
    Var,
    const,
)
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import loads_in, substitute, transform

if TYPE_CHECKING:
    from tilecraft.schedule.schedule import Schedule

_HALF = (DType.FLOAT16, DType.BFLOAT16)


@dataclass(frozen=True)
class Local:
    """A tensor held in a buffer local to the kernel: the region it holds (None: whole)."""

    buffer: Buffer
    region: ProducerRegion | None = None


@dataclass
class _StageContext:
    stage: Stage
    leaves: list[Leaf]
    values: dict[IterVar, Expr]         # axis -> global value
    relative: tuple[Expr, ...]          # spatial axes, relative to the region
    guards: list[Guard]
    body: Expr                          # effective body, guarded loads clamped


class KernelEmitter(CrossThreadReduction, DataflowEmission):
    """Builds the body of the kernel of ``root`` (see the module docstring)."""

    def __init__(self, schedule: Schedule, root: Stage,
                 children: dict[str, dict[object, list[Stage]]], params: dict[Tensor, Buffer],
                 view: TargetView, options: LoweringOptions) -> None:
        self.schedule = schedule
        self.root = root
        self.children = children
        self.params = params
        self.view = view
        self.options = options
        self.locals: dict[Tensor, Local] = {}
        self.ranges: dict[Var, tuple[int, int]] = {}
        self.names: set[str] = {buffer.name for buffer in params.values()}
        self.origins: dict[Var, tuple[str, str]] = {}

    # names and buffers -------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        base = base.replace(".", "_")
        name, count = base, 0
        while name in self.names:
            count += 1
            name = f"{base}{count}"
        self.names.add(name)
        return name

    def local_buffer(self, name: str, shape: tuple[int, ...], dtype: DType, level: str | None,
                     stage: Stage | None = None) -> Buffer:
        if level is None:
            level = self.default_level(shape, dtype)
        partitions = tuple(stage.partitions) if stage is not None else ()
        return Buffer(self.fresh(name), shape, dtype, level=level, partitions=partitions)

    def default_level(self, shape: tuple[int, ...], dtype: DType) -> str:
        """Registers when the buffer fits them (as lowering's local accumulators), else the
        level of the kernel's parameters."""
        options = self.options
        nbytes = dtype.bytes
        for extent in shape:
            nbytes *= extent
        fits = options.register_bytes is None or nbytes <= options.register_bytes
        return options.register_level if options.register_level and fits \
            else options.param_level

    def holder(self, tensor: Tensor) -> Buffer:
        local = self.locals.get(tensor)
        return local.buffer if local is not None else self.params[tensor]

    # expressions -------------------------------------------------------------------------
    def convert(self, expr: Expr, values: dict[IterVar, Expr], scope: Scope) -> Expr:
        """A te expression of a stage's axes as a Kernel IR expression of loop variables."""
        expr = simplify(substitute(expr, values))

        def to_buffer(node: Expr) -> Expr | None:
            if isinstance(node, Load):
                indices = tuple(transform(index, to_buffer) for index in node.indices)
                buffer, indices = self.locate(node.tensor, indices, scope)
                return BufferLoad(buffer, indices)
            return None

        return transform(expr, to_buffer)

    def locate(self, tensor: Tensor, indices: Sequence[Expr],
               scope: Scope) -> tuple[Buffer, tuple[Expr, ...]]:
        local = self.locals.get(tensor)
        if local is None:
            buffer = self.params[tensor]
        else:
            buffer = local.buffer
            if local.region is not None:
                indices = [local.region.local_index(d, index) for d, index in enumerate(indices)]
        return buffer, self.in_bounds(buffer, indices, scope)

    def in_bounds(self, buffer: Buffer, indices: Sequence[Expr],
                  scope: Scope) -> tuple[Expr, ...]:
        facts = list(scope.facts)
        result = []
        for index, extent in zip(indices, buffer.shape):
            index = simplify(index)
            if not index_in_bounds(index, extent, self.ranges, facts):
                if not prove_nonnegative(Binary(BinaryOp.SUB, Const(extent - 1, index.dtype),
                                                index), self.ranges, facts):
                    index = Binary(BinaryOp.MIN, index, Const(extent - 1, index.dtype))
                if not prove_nonnegative(index, self.ranges, facts):
                    index = Binary(BinaryOp.MAX, index, Const(0, index.dtype))
            result.append(index)
        return tuple(result)

    # stages ------------------------------------------------------------------------------
    def emit_root(self) -> Stmt:
        return self.emit_stage(self.root, None, Scope())

    def emit_stage(self, stage: Stage, region: ProducerRegion | None, scope: Scope) -> Stmt:
        ctx = self._context(stage, region, scope)
        overridden: dict[Tensor, Local | None] = {}
        read_copies: list[Stmt] = []
        buffers: list[Buffer] = []
        for name, level in stage.read_buffers.items():
            tensor = self.schedule.tensor(name, "buffer")
            source = self.locals.get(tensor)
            if source is not None and source.region is not None:
                raise schedule_error("buffer", stage.name, None, f"{name} is computed inside "
                                     "this kernel over a partial region; buffer it with "
                                     f"s[{name!r}].buffer(level) instead")
            src = self.holder(tensor)
            local = self.local_buffer(f"{name}_{level}", tensor.shape, tensor.dtype, level)
            zeros = tuple(const(0) for _ in tensor.shape)
            read_copies.append(Copy(Region(local, zeros, tensor.shape),
                                    Region(src, zeros, tensor.shape)))
            buffers.append(local)
            overridden[tensor] = source
            self.locals[tensor] = Local(local)
        target, write_back = self._output(stage, region, ctx)
        inner = {leaf.var for leaf in ctx.leaves if leaf.var is not None}
        root_buffers, prelude = self._attach(ctx, self.children.get(stage.name, {}).get(None, []),
                                             inner, scope)
        buffers += root_buffers
        if stage.streaming is not None:
            nest = self._dataflow(ctx, target, scope, region)
        elif stage.is_reduction:
            nest = self._reduction(ctx, target, scope)
        else:
            nest = self._elementwise(ctx, target, scope)
        stmt = seq([*read_copies, *prelude, nest, *write_back])
        for buffer in reversed(buffers):
            stmt = Allocate(buffer, stmt)
        if write_back:
            stmt = Allocate(target[0], stmt)
        for tensor, previous in overridden.items():
            if previous is None:
                del self.locals[tensor]
            else:
                self.locals[tensor] = previous
        return stmt

    def _context(self, stage: Stage, region: ProducerRegion | None,
                 scope: Scope) -> _StageContext:
        tensor = stage.tensor
        roots = {}
        for position, loop in enumerate(stage.axes):
            roots[loop] = region.dims[position].extent if region is not None else loop.extent
        for loop in stage.reduce_axes:
            roots[loop] = loop.extent
        extents = derive_extents(roots, stage.relations)
        leaves = []
        dtype_lanes = self.view.lanes(tensor.dtype)
        for loop in stage.leaves:
            extent = extents[loop]
            annotation = stage.annotation(loop)
            single = extent == 1 and annotation.kind is not LoopKind.BOUND
            var = None if single else Var(self.fresh(loop.name))
            if var is not None:
                self.ranges[var] = (0, extent - 1)
                self.origins[var] = (stage.name, loop.name)
            lanes = 0
            if annotation.kind is LoopKind.VECTOR:
                # no wider than the loop needs: 8 lanes for 8 iterations, not a masked 16
                lanes = annotation.lanes or min(dtype_lanes, 1 << max(extent - 1, 0).bit_length())
            elif annotation.kind is LoopKind.UNROLLED:
                lanes = annotation.factor or extent
            leaves.append(Leaf(loop, var, extent, annotation, lanes))
        leaf_values = {leaf.loop: leaf.value for leaf in leaves}
        values, guards = derive_values(leaf_values, extents, stage.relations)
        axis_values: dict[IterVar, Expr] = {}
        relative = []
        for position, loop in enumerate(stage.axes):
            rel = values[loop]
            relative.append(rel)
            if region is None or region.dims[position].full:
                axis_values[stage.iter_vars[loop]] = rel
                continue
            dim = region.dims[position]
            value = simplify(dim.base + rel)
            axis_values[stage.iter_vars[loop]] = value
            if index_in_bounds(value, tensor.shape[position], self.ranges, list(scope.facts)):
                continue  # the guards around the attach point keep it inside the tensor
            rng = interval(value, self.ranges)
            extent = tensor.shape[position]
            if rng is None or rng[1] >= extent:
                guards.append(Guard(value < extent, AxisKind.SPATIAL, loop.name))
            if rng is None or rng[0] < 0:
                guards.append(Guard(value >= 0, AxisKind.SPATIAL, loop.name))
        for loop in stage.reduce_axes:
            axis_values[stage.iter_vars[loop]] = values[loop]
        body = clamp_guarded_loads(self.schedule.effective_body(stage))
        return _StageContext(stage, leaves, axis_values, tuple(relative), guards, body)

    def _output(self, stage: Stage, region: ProducerRegion | None,
                ctx: _StageContext) -> tuple[tuple[Buffer, tuple[Expr, ...]], list[Stmt]]:
        """Where the stage stores (buffer and indices) and the copy-out after it, if any."""
        tensor = stage.tensor
        if region is not None:
            return (self.locals[tensor].buffer, ctx.relative), []
        out = self.params[tensor]
        indices = tuple(ctx.values[axis] for axis in tensor.axes)
        if stage.level is None:
            if stage.partitions:
                raise schedule_error("partition", stage.name, None, f"the stage has no on-chip "
                                     f"buffer to partition: it stores straight into the "
                                     f"kernel's output {out.name} in {out.level}; give it one "
                                     f"with s[{stage.name!r}].buffer(level) or compute it "
                                     "inside another stage")
            return (out, indices), []
        local = self.local_buffer(f"{stage.name}_{stage.level}", tensor.shape, tensor.dtype,
                                  stage.level, stage)
        zeros = tuple(const(0) for _ in tensor.shape)
        copy = Copy(Region(out, zeros, tensor.shape), Region(local, zeros, tensor.shape))
        return (local, indices), [copy]

    def _attach(self, ctx: _StageContext, children: list[Stage], inner: set[Var],
                scope: Scope) -> tuple[list[Buffer], list[Stmt]]:
        """Emit ``children`` (stages computed at one point of ``ctx``'s stage) into local
        buffers holding the regions that the loops ``inner`` (and later children) read."""
        regions = self._regions(ctx, children, inner)
        buffers, stmts = [], []
        for child in children:
            region = regions[child.name]
            buffer = self.local_buffer(child.name, region.shape, child.tensor.dtype,
                                       child.level, child)
            self.locals[child.tensor] = Local(buffer, region)
            buffers.append(buffer)
            stmts.append(self.emit_stage(child, region, scope))
        return buffers, stmts

    def _regions(self, ctx: _StageContext, children: list[Stage],
                 inner: set[Var]) -> dict[str, ProducerRegion]:
        """Bound inference for stages computed at the same point: each child's region covers
        what the consumer's inner loops read of it, and what the children after it (its
        consumers among them) read over their own regions. Consumers come after their
        producers, so the regions are inferred from the last child back."""
        ranges = {var: self.ranges[var] for var in inner}
        symbolic: dict[str, tuple[Expr, dict[IterVar, Expr]]] = {}
        regions: dict[str, ProducerRegion] = {}
        for position in range(len(children) - 1, -1, -1):
            child = children[position]
            indices = [tuple(simplify(substitute(index, ctx.values)) for index in load.indices)
                       for load in loads_in(ctx.body) if load.tensor is child.tensor]
            for reader in children[position + 1:]:
                reader_body, reader_values = symbolic[reader.name]
                indices += [tuple(simplify(substitute(index, reader_values))
                                  for index in load.indices)
                            for load in loads_in(reader_body) if load.tensor is child.tensor]
            region = infer_region(indices, child.tensor.shape, ranges)
            regions[child.name] = region
            values: dict[IterVar, Expr] = {}
            for dim, axis in zip(region.dims, child.tensor.axes):
                offset = Var(f"{axis.name}_t")
                ranges[offset] = (0, dim.extent - 1)
                values[axis] = offset if dim.full else simplify(dim.base + offset)
            for loop in child.reduce_axes:
                offset = Var(f"{loop.name}_t")
                ranges[offset] = (0, loop.extent - 1)
                values[child.iter_vars[loop]] = offset
            body = clamp_guarded_loads(self.schedule.effective_body(child))
            symbolic[child.name] = (body, values)
        return regions

    def _attach_fn(self, ctx: _StageContext, offset: int
                   ) -> Callable[[int, Scope], tuple[list[Buffer], list[Stmt]]]:
        attached = self.children.get(ctx.stage.name, {})

        def at_leaf(position: int, scope: Scope) -> tuple[list[Buffer], list[Stmt]]:
            index = offset + position
            children = attached.get(ctx.leaves[index].loop, [])
            if not children:
                return [], []
            inner = {leaf.var for leaf in ctx.leaves[index + 1:] if leaf.var is not None}
            return self._attach(ctx, children, inner, scope)

        return at_leaf

    def _store(self, buffer: Buffer, indices: tuple[Expr, ...], value: Expr, scope: Scope,
               accumulate: ReduceOp | None = None) -> Store:
        return Store(buffer, self.in_bounds(buffer, indices, scope), value.astype(buffer.dtype),
                     accumulate)

    def _elementwise(self, ctx: _StageContext, target: tuple[Buffer, tuple[Expr, ...]],
                     scope: Scope) -> Stmt:
        buffer, indices = target

        def innermost(inner_scope: Scope, pending: list[Guard]) -> Stmt:
            value = self.convert(ctx.body, ctx.values, inner_scope)
            return self._store(buffer, indices, value, inner_scope)

        return build_nest(ctx.leaves, ctx.guards, scope, self._attach_fn(ctx, 0), innermost)

    def _reduction(self, ctx: _StageContext, target: tuple[Buffer, tuple[Expr, ...]],
                   scope: Scope) -> Stmt:
        body = ctx.body
        assert isinstance(body, Reduce)
        out, out_indices = target
        leaves = ctx.leaves
        first = next((n for n, leaf in enumerate(leaves) if leaf.loop.is_reduce), len(leaves))
        if first < len(leaves) and leaves[first].kind is LoopKind.BOUND:
            return self._cross_thread_reduction(ctx, target, scope, first)
        bound = next((leaf for leaf in leaves[first:]
                      if leaf.loop.is_reduce and leaf.kind is LoopKind.BOUND), None)
        if bound is not None:
            raise schedule_error("bind", ctx.stage.name, bound.loop.name, "a reduce loop bound "
                                 "to a thread axis must be the stage's outermost reduce loop "
                                 "(a cross-thread reduction); reorder it outward")
        outer, inner = leaves[:first], leaves[first:]
        inner_spatial = [leaf for leaf in inner if not leaf.loop.is_reduce]
        local = out.dtype in _HALF

        def reduction(outer_scope: Scope, pending: list[Guard]) -> Stmt:
            spatial = [g for g in pending if g.kind is AxisKind.SPATIAL]
            if local:
                shape = tuple(leaf.extent for leaf in inner_spatial) or (1,)
                acc = self.local_buffer(f"{ctx.stage.name}_acc", shape, DType.FLOAT32, None)
                acc_indices: tuple[Expr, ...] = \
                    tuple(leaf.value for leaf in inner_spatial) or (const(0),)
            else:
                acc, acc_indices = out, out_indices
            identity = Reduce(body.op, body.body.astype(acc.dtype), body.axes).identity()

            def init(s: Scope, _: list[Guard]) -> Stmt:
                return self._store(acc, acc_indices, const(identity, acc.dtype), s)

            def update(s: Scope, _: list[Guard]) -> Stmt:
                value = self.convert(body.body, ctx.values, s).astype(acc.dtype)
                return self._store(acc, acc_indices, value, s, body.op)

            def store_out(s: Scope, _: list[Guard]) -> Stmt:
                return self._store(out, out_indices, BufferLoad(acc, acc_indices), s)

            stmts = [build_nest(inner_spatial, spatial, outer_scope, no_attach, init),
                     build_nest(inner, pending, outer_scope, self._attach_fn(ctx, first),
                                update)]
            if local:
                stmts.append(build_nest(inner_spatial, spatial, outer_scope, no_attach,
                                        store_out))
                return Allocate(acc, seq(stmts))
            return seq(stmts)

        return build_nest(outer, ctx.guards, scope, self._attach_fn(ctx, 0), reduction)


__all__ = ["KernelEmitter", "Local"]
