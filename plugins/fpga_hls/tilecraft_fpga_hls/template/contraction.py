"""FlexTensor's FPGA template for contractions (thesis §4.5, Fig. 4.4c), in the form of Zhang
et al.'s FPGA'15 convolution accelerator: a ``Tm`` x ``Tn`` PE array — ``Tm`` copies (one per
output element of the *out* axis) of an adder tree summing ``Tn`` products (one per element of
the *in* reduce axis) — fed from tiles in partitioned BRAM.

For ``C[s...] = sum_r A[...] * B[...]`` with affine, non-negative indices (GEMM, batched GEMM,
convolutions, ...), every axis gets a tile: ``Tm`` on the out axis, ``Tn`` on the in axis,
``tiles[axis]`` on the other spatial axes, the full extent on the other reduce axes. The kernel:

.. code-block:: text

    for each output tile (serial):
      out_buf = 0                                   (pipelined, out axis unrolled)
      for each in-axis tile (serial):
        dataflow (ping-pong buffers: the read of the next tile overlaps this compute):
          read_A, read_B, ...: each operand's footprint -> its BRAM buffer (zero outside
                   the tensor), one stage and one AXI port per operand, ``lanes``
                   consecutive elements of the last dimension per cycle (one wide beat)
          compute: pipelined over the other spatial (or reduce) axes, II asked
                     unroll Tm: out_buf[...] += sum of Tn products   (adder tree)
      write: out_buf -> C (inside the tensor), ``lanes`` elements per cycle

``lanes`` elements per cycle along a buffer's last dimension need ``ceil(lanes / 2)`` banks
there (a BRAM bank has two ports): the buffers are partitioned cyclically on it, and the
model (:mod:`..model`) counts the BRAM that costs and the AXI beats the lanes share.

Tiles need not divide the extents: the hardware always runs whole tiles (as FPGA'15 counts
``ceil(M / Tm)``), operands are zero outside the tensor and the write stage keeps inside it.
``order="reduce"`` pipelines the other reduce axes instead, an accumulation into one element
per iteration: its II waits for the adder (:mod:`..model`).

>>> from tilecraft import ops, te
>>> C = ops.matmul(te.placeholder((5, 7), name="A"), te.placeholder((7, 3), name="B"))
>>> view = as_contraction(C)
>>> view.out_axes, view.in_axes
(('i', 'j'), ('k',))
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
from tilecraft.kernel_ir import Allocate, Buffer, For, Kernel, LoopKind, Seq, Store
from tilecraft.kernel_ir.concurrency import Dataflow
from tilecraft.kernel_ir.nodes import ArrayPartition, BufferLoad, IfThenElse, PartitionKind, Stmt
from tilecraft.te import Var, const
from tilecraft.te.bounds import Affine, affine
from tilecraft.te.expr import Binary, BinaryOp, Cast, Expr, IterVar, Load, Reduce, ReduceOp
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import substitute, transform

__all__ = ["ContractionView", "TemplateConfig", "as_contraction", "lower_contraction"]


@dataclass(frozen=True)
class ContractionView:
    """A compute the template takes: a sum over a product of loads with affine indices."""

    tensor: Tensor
    loads: tuple[Load, ...]
    forms: tuple[tuple[Affine, ...], ...]

    @property
    def out_axes(self) -> tuple[str, ...]:
        """Spatial axes that may carry the PE array's ``Tm`` (extent above one)."""
        return tuple(a.name for a in self.tensor.axes if a.extent > 1)

    @property
    def in_axes(self) -> tuple[str, ...]:
        """Reduce axes that may carry the adder tree's ``Tn`` (extent above one)."""
        return tuple(a.name for a in self.tensor.reduce_axes if a.extent > 1)

    def axis(self, name: str) -> IterVar:
        for axis in (*self.tensor.axes, *self.tensor.reduce_axes):
            if axis.name == name:
                return axis
        names = ", ".join(a.name for a in (*self.tensor.axes, *self.tensor.reduce_axes))
        raise LoweringError(f"compute {self.tensor.name} has no axis {name!r}; its axes are "
                            f"{names}")


def _product_loads(expr: Expr) -> list[Load] | None:
    while isinstance(expr, Cast):
        expr = expr.x
    if isinstance(expr, Load):
        return [expr]
    if isinstance(expr, Binary) and expr.op is BinaryOp.MUL:
        a, b = _product_loads(expr.a), _product_loads(expr.b)
        return None if a is None or b is None else a + b
    return None


def as_contraction(tensor: Tensor) -> ContractionView | None:
    """``tensor`` as a contraction the template takes, or ``None`` (then the core's dataflow
    lowering applies): a sum over a product of loads whose indices are affine in the axes with
    non-negative coefficients and constants (zero padding outside the tensor is then exact)."""
    body = tensor.body if not tensor.is_placeholder else None
    if not isinstance(body, Reduce) or body.op is not ReduceOp.SUM or not tensor.axes:
        return None
    loads = _product_loads(body.body)
    if not loads or tensor.dtype is DType.BOOL:
        return None
    forms = []
    for load in loads:
        form = tuple(affine(index) for index in load.indices)
        if any(f is None or f.constant < 0 or any(c < 0 for _, c in f.coefs) for f in form):
            return None
        forms.append(form)
    return ContractionView(tensor, tuple(loads), tuple(forms))  # type: ignore[arg-type]


@dataclass(frozen=True)
class TemplateConfig:
    """The template's parameters (``Target.lower_compute``'s config as a record).

    ``pe_out`` / ``tm``: the spatial axis unrolled into ``tm`` PE rows; ``pe_in`` / ``tn``: the
    reduce axis summed by a ``tn``-input adder tree (``pe_in=None``: no tree); ``tiles``: tile
    sizes of the other spatial axes (missing: whole extent); ``order``: ``"spatial"`` pipelines
    the output tile's positions, ``"reduce"`` the other reduce axes; ``banks``: BRAM banks per
    unrolled operand dimension as a divisor of its unroll (1: one bank per PE); ``ii``: the
    initiation interval asked (``None``: 1, relaxed by the model where a dependence or the
    ports need more; a number: a requirement the model refuses to relax); ``lanes``: elements
    the read and write stages move per cycle along a buffer's last dimension (one AXI beat
    while ``lanes`` x the element size fits the port, e.g. 16 float32 in 512 bits).
    """

    pe_out: str
    tm: int
    pe_in: str | None
    tn: int
    tiles: Mapping[str, int]
    order: str = "spatial"
    banks: int = 1
    ii: int | None = None
    lanes: int = 1

    @staticmethod
    def parse(view: ContractionView, config: Mapping[str, Any]) -> TemplateConfig:
        known = {"pe_out", "tm", "pe_in", "tn", "tiles", "order", "banks", "ii", "lanes"}
        unknown = sorted(set(config) - known)
        name = view.tensor.name
        if unknown:
            raise LoweringError(f"compute {name}: the fpga_hls template has no parameter(s) "
                                f"{', '.join(unknown)}; its parameters are "
                                f"{', '.join(sorted(known))}")
        out = config.get("pe_out", view.out_axes[0] if view.out_axes else view.tensor.axes[0].name)
        inner = config.get("pe_in", view.in_axes[0] if view.in_axes else None)
        parsed = TemplateConfig(out, int(config.get("tm", 1)), inner, int(config.get("tn", 1)),
                                dict(config.get("tiles", {})), str(config.get("order", "spatial")),
                                int(config.get("banks", 1)),
                                None if config.get("ii") is None else int(config["ii"]),
                                int(config.get("lanes", 1)))
        if view.axis(out).kind.value != "spatial":
            raise LoweringError(f"compute {name}: pe_out={out!r} must be a spatial axis")
        if inner is not None and view.axis(inner).kind.value != "reduce":
            raise LoweringError(f"compute {name}: pe_in={inner!r} must be a reduce axis")
        for what, value in (("tm", parsed.tm), ("tn", parsed.tn), ("banks", parsed.banks),
                            *((f"tiles[{k}]", v) for k, v in parsed.tiles.items()),
                            ("ii", parsed.ii or 1), ("lanes", parsed.lanes)):
            if value < 1:
                raise LoweringError(f"compute {name}: the fpga_hls template's {what} must be a "
                                    f"positive int, got {value}")
        if parsed.order not in ("spatial", "reduce"):
            raise LoweringError(f"compute {name}: order must be 'spatial' or 'reduce', got "
                                f"{parsed.order!r}")
        return parsed


def _tile_sizes(view: ContractionView, cfg: TemplateConfig) -> dict[str, int]:
    sizes = {}
    for axis in view.tensor.axes:
        wanted = cfg.tm if axis.name == cfg.pe_out else cfg.tiles.get(axis.name, axis.extent)
        sizes[axis.name] = min(int(wanted), axis.extent) if axis.name != cfg.pe_out else \
            int(wanted)
    for axis in view.tensor.reduce_axes:
        sizes[axis.name] = cfg.tn if axis.name == cfg.pe_in else axis.extent
    return sizes


def _loop_nest(vars_: list[Var], extents: list[int], body: Stmt, innermost: LoopKind,
               ii: int | None = 1) -> Stmt:
    """``body`` in loops over ``vars_`` (outer first), the innermost of kind ``innermost``."""
    for depth in range(len(vars_) - 1, -1, -1):
        inner = depth == len(vars_) - 1
        kind = innermost if inner else LoopKind.SERIAL
        body = For(vars_[depth], const(extents[depth]), kind, body,
                   initiation_interval=ii if kind is LoopKind.PIPELINED else None,
                   lanes=extents[depth] if kind is LoopKind.UNROLLED else 0)
    return body


def _wide_nest(vars_: list[Var], extents: list[int], make_body: Any, lanes: int) -> Stmt:
    """``make_body(indices)`` in a pipelined nest over ``vars_`` whose last loop moves
    ``lanes`` consecutive positions per iteration (an unrolled lane loop inside a pipelined
    beat loop, the ragged last beat guarded); ``lanes`` 1 (or a last extent of 1) is the plain
    nest."""
    lanes = min(lanes, extents[-1])
    if lanes <= 1:
        return _loop_nest(vars_, extents, make_body(tuple(vars_)), LoopKind.PIPELINED)
    last = vars_[-1]
    beat, lane = Var(f"{last.name}_beat"), Var(f"{last.name}_lane")
    position = beat * lanes + lane
    body = make_body((*vars_[:-1], position))
    if extents[-1] % lanes:
        body = IfThenElse(position < extents[-1], body)
    inner = For(beat, const(math.ceil(extents[-1] / lanes)), LoopKind.PIPELINED,
                For(lane, const(lanes), LoopKind.UNROLLED, body, lanes=lanes),
                initiation_interval=1)
    return _loop_nest(vars_[:-1], extents[:-1], inner, LoopKind.SERIAL) if vars_[:-1] \
        else inner


def _with_lane_banks(partitions: list[ArrayPartition], shape: tuple[int, ...],
                     lanes: int) -> tuple[ArrayPartition, ...]:
    """``partitions`` with the last dimension split cyclically into ``ceil(lanes / 2)``
    banks (at least as many as it had): ``lanes`` consecutive elements per cycle, two per
    bank."""
    lanes = min(lanes, shape[-1]) if shape else 1
    if lanes <= 2:
        return tuple(partitions)
    dim, wanted = len(shape) - 1, math.ceil(lanes / 2)
    others = [p for p in partitions if p.dim != dim]
    factor = max([wanted, *(p.factor for p in partitions if p.dim == dim)])
    return (*others, ArrayPartition(dim, PartitionKind.CYCLIC, factor))


def _all(conditions: list[Expr]) -> Expr | None:
    result = None
    for cond in conditions:
        result = cond if result is None else result & cond
    return result


def lower_contraction(view: ContractionView, config: Mapping[str, Any]) -> Kernel:
    """The template's kernel for ``view`` under ``config`` (module docstring)."""
    cfg = TemplateConfig.parse(view, config)
    tensor = view.tensor
    sizes = _tile_sizes(view, cfg)
    axes = (*tensor.axes, *tensor.reduce_axes)
    tile_var = {a.name: Var(f"t_{a.name}") for a in axes}
    local = {a.name: Var(f"l_{a.name}") for a in axes}
    trips = {a.name: math.ceil(a.extent / sizes[a.name]) for a in axes}
    # a whole-extent axis has no tile loop: its origin is zero
    origin = {a.name: tile_var[a.name] * sizes[a.name] if trips[a.name] > 1 else const(0)
              for a in axes}
    banks_of = {cfg.pe_out: max(1, cfg.tm // cfg.banks)}
    if cfg.pe_in is not None:
        banks_of[cfg.pe_in] = max(1, cfg.tn // cfg.banks)

    params: dict[str, Buffer] = {}
    for load in view.loads:
        params.setdefault(load.tensor.name, Buffer(load.tensor.name, load.tensor.shape,
                                                   load.tensor.dtype, level="DDR"))
    out = Buffer(tensor.name, tensor.shape, tensor.dtype, level="DDR")

    # on-chip buffers: each operand's footprint of one tile, the output tile
    spatial = [a.name for a in tensor.axes]
    out_shape = tuple(sizes[n] for n in spatial)
    out_buf = Buffer(f"{tensor.name}_buf", out_shape, tensor.dtype, level="BRAM",
                     partitions=_with_lane_banks([ArrayPartition(
                         spatial.index(cfg.pe_out), PartitionKind.CYCLIC,
                         banks_of[cfg.pe_out])], out_shape, cfg.lanes))
    reads: list[Stmt] = []
    operand_bufs: list[tuple[Buffer, tuple[Affine, ...]]] = []
    for index, (load, form) in enumerate(zip(view.loads, view.forms)):
        shape, partitions = [], []
        for dim, f in enumerate(form):
            terms = f.terms()
            shape.append(1 + sum(c * (sizes[v.name] - 1) for v, c in terms.items()))
            unrolled = [v.name for v, c in terms.items() if c == 1 and v.name in banks_of]
            if unrolled:
                partitions.append(ArrayPartition(dim, PartitionKind.CYCLIC,
                                                 math.prod(banks_of[n] for n in unrolled)))
        buf = Buffer(f"{load.tensor.name}_tile{index}", tuple(shape), load.tensor.dtype,
                     level="BRAM", partitions=_with_lane_banks(partitions, tuple(shape),
                                                               cfg.lanes))
        operand_bufs.append((buf, form))
        copy_vars = [Var(f"c{index}_{dim}") for dim in range(len(shape))]
        base = [substitute(_affine_expr(f), {v: origin[v.name] for v, _ in f.coefs})
                for f in form]

        def fill(at: tuple[Expr, ...], buf: Buffer = buf, load: Load = load,
                 base: list[Expr] = base) -> Stmt:
            where = [b + c for b, c in zip(base, at)]
            inside = _all([w < extent for w, extent in zip(where, load.tensor.shape)])
            stmt: Stmt = Store(buf, at, BufferLoad(params[load.tensor.name], tuple(where)))
            if inside is not None:
                stmt = IfThenElse(inside, stmt, Store(buf, at, const(0, load.tensor.dtype)))
            return stmt

        names = [other.tensor.name for other in view.loads]
        stage_name = f"read_{load.tensor.name}" if names.count(load.tensor.name) == 1 else \
            f"read_{load.tensor.name}{index}"
        reads.append(For(Var(stage_name), const(1), LoopKind.STAGE,
                         _wide_nest(copy_vars, shape, fill, cfg.lanes)))

    # compute: Tm rows (unrolled) of a Tn-input adder tree
    def local_load(node: Expr, lane: int) -> Expr | None:
        if isinstance(node, Load):
            position = view.loads.index(node)
            buf, form = operand_bufs[position]
            mapping = {v: (const(lane) if v.name == cfg.pe_in else local[v.name])
                       for f in form for v, _ in f.coefs}
            return BufferLoad(buf, tuple(substitute(_affine_expr(f), mapping) for f in form))
        return None

    product = tensor.body.body  # type: ignore[union-attr]
    lanes = sizes[cfg.pe_in] if cfg.pe_in is not None else 1
    terms = [transform(product, lambda node, lane=lane: local_load(node, lane))
             for lane in range(lanes)]
    if product.dtype != tensor.dtype:
        terms = [Cast(tensor.dtype, term) for term in terms]
    tree = _adder_tree(terms)
    accumulate = Store(out_buf, tuple(local[n] for n in spatial), tree, accumulate=ReduceOp.SUM)
    row = For(local[cfg.pe_out], const(cfg.tm), LoopKind.UNROLLED, accumulate, lanes=cfg.tm)
    others_spatial = [a.name for a in tensor.axes if a.name != cfg.pe_out]
    others_reduce = [a.name for a in tensor.reduce_axes if a.name != cfg.pe_in]
    outer, piped = (others_reduce, others_spatial) if cfg.order == "spatial" else \
        (others_spatial, others_reduce)
    compute: Stmt = row
    if piped:
        compute = _loop_nest([local[n] for n in piped], [sizes[n] for n in piped], compute,
                             LoopKind.PIPELINED, cfg.ii or 1)
    else:
        compute = For(Var("l_one"), const(1), LoopKind.PIPELINED, compute,
                      initiation_interval=cfg.ii or 1)
    if outer:
        compute = _loop_nest([local[n] for n in outer], [sizes[n] for n in outer], compute,
                             LoopKind.SERIAL)
    stage = Dataflow((*reads, For(Var("compute"), const(1), LoopKind.STAGE, compute)))
    reduce_loop: Stmt = stage
    if cfg.pe_in is not None and trips[cfg.pe_in] > 1:
        reduce_loop = For(tile_var[cfg.pe_in], const(trips[cfg.pe_in]), LoopKind.SERIAL, stage)

    # zero the output tile; write it back where it lies inside the tensor
    zero_row = For(local[cfg.pe_out], const(cfg.tm), LoopKind.UNROLLED, Store(
        out_buf, tuple(local[n] for n in spatial), const(0, tensor.dtype)), lanes=cfg.tm)
    zero = _loop_nest([local[n] for n in others_spatial], [sizes[n] for n in others_spatial],
                      zero_row, LoopKind.PIPELINED) if others_spatial else zero_row

    def put(at: tuple[Expr, ...]) -> Stmt:
        where = [origin[n] + position for n, position in zip(spatial, at)]
        inside = _all([w < a.extent for w, a in zip(where, tensor.axes)
                       if trips[a.name] * sizes[a.name] != a.extent])
        stmt: Stmt = Store(out, tuple(where), BufferLoad(out_buf, at))
        return IfThenElse(inside, stmt) if inside is not None else stmt

    write = _wide_nest([local[n] for n in spatial], [sizes[n] for n in spatial], put,
                       cfg.lanes)
    body: Stmt = Seq((zero, reduce_loop, write))
    for name in reversed(spatial):
        if trips[name] > 1:
            body = For(tile_var[name], const(trips[name]), LoopKind.SERIAL, body)
    for buf, _ in reversed(operand_bufs):
        body = Allocate(buf, body)
    body = Allocate(out_buf, body)
    ordered = [params[t.name] for t in tensor.inputs if t.name in params]
    attrs: dict[str, Any] = {"strategy": "fpga_hls.contraction", "config": dict(config)}
    if cfg.ii is not None:
        attrs["required_ii"] = cfg.ii
    return Kernel(tensor.name, (*ordered, out), (tensor.name,), body, attrs=attrs)


def _affine_expr(form: Affine) -> Expr:
    expr: Expr | None = const(form.constant) if form.constant else None
    for var, coef in form.coefs:
        term = var if coef == 1 else var * coef
        expr = term if expr is None else expr + term
    return expr if expr is not None else const(0)


def _adder_tree(terms: list[Expr]) -> Expr:
    """A balanced sum of ``terms`` (depth ``ceil(log2 n)`` adders, as HLS builds it)."""
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]
