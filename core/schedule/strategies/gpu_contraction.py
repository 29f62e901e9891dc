"""The GPU tiled-contraction template: a matrix product (dense, matmul, batch_matmul, gemv, a
convolution read through im2col-style indices = implicit GEMM) as a shared-memory tiled GEMM
kernel, built directly as Kernel IR for any target whose spec declares a thread hierarchy with
a shared level (thesis §4.5's GPU template: outer loops to blocks, inner to threads, operands
staged in shared memory, results in registers).

The compute is seen as ``C[b, m, n] = sum_k A(b, m, k) * B(b, n, k)``
(:func:`tiled_contraction`): the output axes both operands read are the batch, those only one
reads its m or n side, in any order in the output (a batched NCHW convolution has
``m = k`` and ``n = (n, oh, ow)``, NHWC the reverse); an output axis an operand reads as
``axis // d`` is split into a batch axis and an inner one first (a grouped convolution's
group; a depthwise convolution is a batch of channels with ``K = kh * kw``). Each operand
element's address comes from its own index expressions and the output's store address from
each output index, the flat ``b`` / ``m`` / ``n`` / ``k`` coordinates unflattened into the
axes of their groups (``k -> c, kh, kw`` for a convolution). A padded convolution reads its
separate ``pad`` compute (an input of the kernel). With tiles
``BM, BN, BK, TM, TN`` (:mod:`.gpu_contraction_tiles`)::

    for block in bound(batch * ceil(M/BM) * ceil(N/BN), axis=<grid x>):
      alloc A_tile[stages, .., ..], B_tile[stages, .., ..] in <shared level>
      for thread in bound((BM/TM) * (BN/TN), axis=<block x>):
        alloc acc[TM, TN], a_frag[TM], b_frag[TN] in <register level>
        acc = 0
        k slices (BK wide), one of:
          stages=1: for kt: load A, B slices (all threads, zero-filled edges); barrier;
                    compute; barrier
          stages=2: pipeline kt (depth 2): stage 0 async-copies slice kt into copy kt % 2 and
                    commits; stage 1 waits for it (wait_group(1), the last one wait_group(0)),
                    barrier, computes, barrier
        compute: for kk in BK: a_frag <- A_tile column, b_frag <- B_tile row,
                 acc[i, j] += a_frag[i] * b_frag[j] (float32)
        if in bounds: C[..] = acc[i, j] (cast to C's dtype)

An operand slice is copied in chunks of ``lanes`` elements along the operand's contiguous
axis (128 bits: 4 float32 / 8 float16; asynchronous copies where the hierarchy declares
``async_copy_bytes``) when the address is affine with unit stride along that axis, every
other stride and the offset are multiples of ``lanes`` and the axis' extent divides by
``lanes`` (not necessarily by the tile: chunks past its end are zeros, their address clamped
to the last chunk); otherwise element by element (asynchronous 4-byte copies of float32,
plain loads else). Rows outside the operand are zero-filled, indices clamped: never an
out-of-bounds read. Where the spec gives the shared level's banks, a tile whose fragment
reads walk its rows gets its rows padded (16-byte steps) so that one subgroup's reads fall in
different banks; fragments running along a tile's rows are read as 128-bit vector loops.

>>> from tilecraft import ops, te
>>> from tilecraft.lower import LoweringOptions
>>> from tilecraft.target.hierarchy import ThreadHierarchy
>>> threads = ThreadHierarchy(axes=[
...     {"name": "blockIdx.x", "scope": "grid", "dim": 0, "max_extent": 65535},
...     {"name": "threadIdx.x", "scope": "block", "dim": 0, "max_extent": 1024}],
...     max_threads_per_block=1024, subgroup_size=32, shared_level="shared",
...     barrier_scopes=["block"])
>>> options = LoweringOptions(threads=threads, register_level="register")
>>> C = ops.matmul(te.placeholder((5, 6), name="A"), te.placeholder((6, 7), name="B"), name="C")
>>> config = {"BM": 4, "BN": 4, "BK": 4, "TM": 2, "TN": 2}
>>> kernel = lower_tiled_contraction(C, options, config)
>>> kernel.launch.grid, kernel.launch.block, kernel.attrs["tiles"]["stages"]
((4,), (4,), 1)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.concurrency import AsyncCopy, CommitGroup, Pipeline, WaitGroup
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Barrier,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    Kernel,
    LaunchConfig,
    LoopKind,
    Region,
    Seq,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.lower.compute import to_kernel_expr
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import Contraction, _axes_of
from tilecraft.schedule.emit_threads import block_barrier_scope
from tilecraft.schedule.strategies.gpu_contraction_tiles import (
    ChipRates,
    ContractionTiles,
    bank_conflicts,
    check_tiles,
    default_tiles,
    estimate_cycles,
    row_reduction_cycles,
    tile_space,
)
from tilecraft.target.hierarchy import LaunchScope
from tilecraft.te import functions as tf
from tilecraft.te.bounds import affine
from tilecraft.te.expr import (
    AxisKind,
    Binary,
    BinaryOp,
    Cast,
    Const,
    Expr,
    IterVar,
    Load,
    Reduce,
    ReduceOp,
    Select,
    Var,
    const,
)
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import substitute, transform, walk

__all__ = ["contraction_template_space", "lower_tiled_contraction", "tiled_contraction"]

#: element types the template computes on (accumulating in float32)
FLOAT_TYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)


def _strip_cast(expr: Expr) -> Expr:
    while isinstance(expr, Cast):
        expr = expr.x
    return expr


def tiled_contraction(tensor: Tensor) -> TiledContraction | None:
    """``tensor`` as a contraction of float operands (float32, float16, bfloat16, possibly
    mixed) into a float result, or ``None`` when the template does not apply."""
    if tensor.is_placeholder or tensor.dtype not in FLOAT_TYPES:
        return None
    body = tensor.op.body
    if not isinstance(body, Reduce) or body.op is not ReduceOp.SUM:
        return None
    product = _strip_cast(body.body)
    if not isinstance(product, Binary) or product.op is not BinaryOp.MUL:
        return None
    left, right = _strip_cast(product.a), _strip_cast(product.b)
    if not (isinstance(left, Load) and isinstance(right, Load)) \
            or left.tensor.dtype not in FLOAT_TYPES or right.tensor.dtype not in FLOAT_TYPES:
        return None
    k_axes = tuple(body.axes)
    contraction = _group(tensor, *_split_groups(tensor, left, right), k_axes) \
        or _group(tensor, left, right, _plain_outputs(tensor), k_axes)
    if contraction is None or not contraction.k_axes:
        return None
    return contraction


@dataclass(frozen=True)
class TiledContraction(Contraction):
    """A :class:`Contraction` whose groups may come in any order in the output, and whose
    axes may be parts of the output's: ``outputs`` gives each output axis' index as an
    expression of the contraction's axes (a grouped convolution's output channel ``k`` is
    ``k_group * K/groups + k_in``; an axis of extent 1 is ``0``)."""

    outputs: tuple[Expr, ...] = ()


def _plain_outputs(tensor: Tensor) -> dict[IterVar, Expr]:
    return {axis: (axis if axis.extent > 1 else const(0)) for axis in tensor.axes}


def _divisors(load: Load, axis: IterVar) -> set[int]:
    """The constants ``d`` of every ``axis // d`` and ``axis % d`` in ``load``'s indices."""
    found = set()
    for index in load.indices:
        for node in walk(index):
            if isinstance(node, Binary) and node.op in (BinaryOp.FLOORDIV, BinaryOp.MOD) \
                    and node.a == axis and isinstance(node.b, Const):
                found.add(int(node.b.value))
    return found


def _split_groups(tensor: Tensor, left: Load, right: Load
                  ) -> tuple[Load, Load, dict[IterVar, Expr]]:
    """The loads with each output axis an operand reads as ``axis // d`` (one ``d`` dividing
    its extent) split into ``axis_group = axis // d`` and ``axis_in = axis % d``: a grouped
    convolution's ``(k // (K/groups)) * (C/groups) + rc`` becomes a batch axis (the group) and
    an m or n axis (the channel inside it). The third value maps each output axis to its
    index in the new axes (:class:`TiledContraction`)."""
    outputs = _plain_outputs(tensor)
    for axis in tensor.axes:
        divisors = _divisors(left, axis) | _divisors(right, axis)
        if len(divisors) != 1:
            continue
        [d] = divisors
        if not 1 < d < axis.extent or axis.extent % d:
            continue
        group = IterVar(f"{axis.name}_group", axis.extent // d, AxisKind.SPATIAL)
        inner = IterVar(f"{axis.name}_in", d, AxisKind.SPATIAL)

        def rewrite(node: Expr, axis: IterVar = axis, d: int = d, group: IterVar = group,
                    inner: IterVar = inner) -> Expr | None:
            if isinstance(node, Binary) and node.a == axis and isinstance(node.b, Const) \
                    and int(node.b.value) == d:
                if node.op is BinaryOp.FLOORDIV:
                    return group
                if node.op is BinaryOp.MOD:
                    return inner
            if isinstance(node, IterVar) and node == axis:
                return group * d + inner
            return None

        left = transform(left, rewrite)  # type: ignore[assignment]
        right = transform(right, rewrite)  # type: ignore[assignment]
        outputs[axis] = group * d + inner
    return left, right, outputs


def _group(tensor: Tensor, left: Load, right: Load, outputs: Mapping[IterVar, Expr],
           k_axes: tuple[IterVar, ...]) -> TiledContraction | None:
    """``left * right`` summed over ``k_axes`` as a contraction: the axes of ``outputs``'
    expressions (in output order) that both operands read are the batch, those only one reads
    are its m or n side; the n side is the operand that reads the output's last axis (of the
    two sides), so that stores along ``n`` are contiguous. ``None`` when an axis is read by
    neither operand or a reduce axis by only one."""
    left_axes, right_axes = _axes_of(left), _axes_of(right)
    if any(k not in left_axes or k not in right_axes for k in k_axes if k.extent > 1):
        return None
    order: list[IterVar] = []
    for axis in tensor.axes:
        for node in _walk(outputs[axis]):
            if isinstance(node, IterVar) and node.extent > 1 and node not in order:
                order.append(node)
    sides: dict[str, list[IterVar]] = {"batch": [], "left": [], "right": []}
    last_side = None
    for axis in order:
        in_left, in_right = axis in left_axes, axis in right_axes
        if not (in_left or in_right):
            return None
        side = "batch" if in_left and in_right else "left" if in_left else "right"
        sides[side].append(axis)
        if side != "batch":
            last_side = side
    n_side = last_side or "right"
    m_side = "left" if n_side == "right" else "right"
    a, b = (left, right) if m_side == "left" else (right, left)
    return TiledContraction(tensor, a, b, tuple(sides["batch"]), tuple(sides[m_side]),
                            tuple(sides[n_side]), tuple(k for k in k_axes if k.extent > 1),
                            outputs=tuple(outputs[axis] for axis in tensor.axes))


def _walk(expr: Expr) -> list[Expr]:
    return list(walk(expr))


def _usable(options: LoweringOptions) -> Any:
    threads = options.threads
    if threads is None or threads.shared_level is None or options.register_level is None \
            or block_barrier_scope(threads) is None:
        return None
    scopes = {axis.scope for axis in threads.axes}
    return threads if {LaunchScope.GRID, LaunchScope.BLOCK} <= scopes else None


def contraction_template_space(tensor: Tensor, options: LoweringOptions) -> Any:
    """The template's :class:`~tilecraft.target.base.TemplateSpace` for ``tensor`` (``None``
    when the template does not apply)."""
    contraction = tiled_contraction(tensor)
    threads = _usable(options)
    if contraction is None or threads is None:
        return None
    return tile_space(contraction.extents(), _element_bytes(contraction), threads)


def _element_bytes(contraction: Contraction) -> int:
    return max(contraction.a.tensor.dtype.bytes, contraction.b.tensor.dtype.bytes)


def lower_tiled_contraction(tensor: Tensor, options: LoweringOptions,
                            config: Mapping[str, Any] | None = None) -> Kernel | None:
    """The tiled kernel computing ``tensor`` (module docstring), or ``None`` when ``tensor``
    is not a float contraction, the options have no thread hierarchy with a shared level and
    a register level, or (``config`` ``None``) a gemv runs faster as the strategy's row
    reduction. ``config`` holds ``BM, BN, BK, TM, TN, stages`` (``None``: the default
    for the spec); a config over a limit is a LoweringError naming it."""
    contraction = tiled_contraction(tensor)
    threads = _usable(options)
    if contraction is None or threads is None:
        return None
    a_bytes = contraction.a.tensor.dtype.bytes
    b_bytes = contraction.b.tensor.dtype.bytes
    if config is None:
        chip = ChipRates.from_spec(options.spec)
        tiles = default_tiles(contraction.extents(), _element_bytes(contraction), threads, chip)
        if _row_reduction_is_faster(contraction, tiles, threads, chip):
            return None
    else:
        tiles = ContractionTiles.from_config(config, tensor.name)
    check_tiles(tensor.name, tiles, threads, a_bytes, b_bytes)
    kernel = _Builder(contraction, tiles, options, threads).kernel()
    if options.spec is not None:
        from tilecraft.kernel_ir.verify import verify_kernel

        verify_kernel(kernel, options.spec)
    return kernel


def _row_reduction_is_faster(contraction: TiledContraction, tiles: ContractionTiles,
                             threads: Any, chip: ChipRates) -> bool:
    """Whether a gemv-like contraction (``M`` or ``N`` of 1) whose matrix operand is read along
    ``k`` runs faster as the GPU strategy's row reduction (a subgroup per output splitting
    ``k``) than as the template's default tiles (one thread per output walking all of ``k``),
    by the same cost model (:func:`~.gpu_contraction_tiles.row_reduction_cycles`)."""
    _, m, n, _ = extents = contraction.extents()
    if min(m, n) != 1:
        return False
    matrix = contraction.b if m == 1 else contraction.a
    last = {node for node in walk(matrix.indices[-1]) if isinstance(node, IterVar)}
    if not last or not last <= set(contraction.k_axes):
        return False
    element_bytes = _element_bytes(contraction)
    return row_reduction_cycles(extents, element_bytes, threads, chip) \
        < estimate_cycles(tiles, extents, element_bytes, threads, chip)


# building the kernel --------------------------------------------------------------------------
def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _unflatten(flat: Expr, axes: tuple[IterVar, ...]) -> dict[IterVar, Expr]:
    """The values of ``axes`` (outer first) at the flat coordinate ``flat``."""
    values: dict[IterVar, Expr] = {}
    inner = 1
    for position in range(len(axes) - 1, -1, -1):
        axis = axes[position]
        part = flat if inner == 1 else flat // inner
        values[axis] = part if position == 0 else part % axis.extent
        inner *= axis.extent
    return values


def _all(conditions: list[Expr]) -> Expr:
    result = conditions[0]
    for cond in conditions[1:]:
        result = result & cond
    return result


def _any(conditions: list[Expr]) -> Expr:
    result = conditions[0]
    for cond in conditions[1:]:
        result = result | cond
    return result


@dataclass
class _Operand:
    """One operand's load, its kernel parameter and its shared tile ``[stages, rows, cols]``:
    ``rows`` walk the ``k`` slice when ``k_rows`` (else the m / n tile), ``cols`` the other."""

    name: str
    load: Load
    param: Buffer
    tile: Buffer
    axes: tuple[IterVar, ...]
    extent: int
    block: int
    k_rows: bool
    lanes: int
    pad: int = 0


class _Builder:
    """Builds the kernel of one contraction and configuration (module docstring)."""

    def __init__(self, contraction: TiledContraction, tiles: ContractionTiles,
                 options: LoweringOptions, threads: Any) -> None:
        self.c = contraction
        self.tiles = tiles
        self.options = options
        self.threads = threads
        tensor = contraction.tensor
        self.tensor = tensor
        self.batch, self.m, self.n, self.k = contraction.extents()
        level = options.param_level
        self.params = {t: Buffer(t.name, tuple(t.shape), t.dtype, level=level)
                       for t in [*tensor.inputs, tensor]}
        self.out = self.params[tensor]
        self.tiles_m = _ceil_div(self.m, tiles.block_m)
        self.tiles_n = _ceil_div(self.n, tiles.block_n)
        self.k_steps = _ceil_div(self.k, tiles.block_k)
        self.block = Var("block")
        self.thread = Var("thread")
        self.kt = Var("kt")
        self.flat = {"b": Var("flat_b"), "s": Var("flat_s"), "k": Var("flat_k")}
        self.a = self._operand("A", contraction.a, contraction.m_axes, self.m, tiles.block_m)
        self.b = self._operand("B", contraction.b, contraction.n_axes, self.n, tiles.block_n)

    def kernel_name(self) -> str:
        return self.tensor.name

    # the operands -------------------------------------------------------------------------
    def element(self, load: Load, axes: tuple[IterVar, ...], batch: Expr, spatial: Expr,
                k: Expr) -> Expr:
        """``load`` as a BufferLoad at the flat batch, m-or-n and k coordinates."""
        values: dict[IterVar, Expr] = {axis: const(0) for axis in self.tensor.axes}
        values.update({axis: const(0) for axis in self.tensor.op.body.axes})
        values.update(_unflatten(batch, self.c.batch_axes))
        values.update(_unflatten(spatial, axes))
        values.update(_unflatten(k, self.c.k_axes))
        return to_kernel_expr(load, values, self.params)

    def _operand(self, name: str, load: Load, axes: tuple[IterVar, ...], extent: int,
                 block: int) -> _Operand:
        tiles = self.tiles
        param = self.params[load.tensor]
        flat = self.flat
        probe = self.element(load, axes, flat["b"], flat["s"], flat["k"])
        lanes, k_rows = 1, True
        contiguous = self._contiguous(probe, param)
        if contiguous is not None:
            k_rows = contiguous == "s"
            cols, col_extent = (block, extent) if k_rows else (tiles.block_k, self.k)
            lanes = self._lanes(param.dtype)
            if lanes <= 1 or cols % lanes or col_extent % lanes \
                    or not self._aligned(probe, param, lanes):
                lanes = 1
        rows, cols = (tiles.block_k, block) if k_rows else (block, tiles.block_k)
        pad = 0 if k_rows else self._row_padding(name, rows, cols, param.dtype.bytes)
        tile = Buffer(f"{name}_tile", (tiles.stages, rows, cols + pad), param.dtype,
                      level=self.threads.shared_level)
        return _Operand(name, load, param, tile, axes, extent, block, k_rows, lanes, pad)

    def _row_padding(self, name: str, rows: int, cols: int, element_bytes: int) -> int:
        """Elements appended to each row of an operand tile whose fragment reads walk its rows
        (``tile[stage, pos * T + i, kk]``, ``pos`` the thread's m or n position), so that the
        reads of one subgroup fall in different banks of the shared level
        (:func:`~.gpu_contraction_tiles.bank_conflicts`); 16-byte steps keep every row's start
        aligned for the 128-bit copies. 0 where the spec declares no banks, nothing conflicts,
        or the padded tiles would not fit the shared memory of a block."""
        spec, tiles = self.options.spec, self.tiles
        level = None if spec is None else next(
            (lvl for lvl in spec.memory.levels if lvl.name == self.threads.shared_level), None)
        if level is None or level.banks is None or level.bank_bytes is None:
            return 0
        threads_n, fragment = tiles.threads_n, tiles.thread_m if name == "A" else tiles.thread_n
        subgroup = min(self.threads.subgroup_size, tiles.threads)
        positions = [(t // threads_n if name == "A" else t % threads_n) * fragment
                     for t in range(subgroup)]
        unit = max(1, 16 // element_bytes)
        best, best_conflicts = 0, None
        for pad in range(0, level.banks * level.bank_bytes // element_bytes + 1, unit):
            offsets = [position * (cols + pad) * element_bytes for position in positions]
            conflicts = bank_conflicts(offsets, level.banks, level.bank_bytes)
            if best_conflicts is None or conflicts < best_conflicts:
                best, best_conflicts = pad, conflicts
        if best == 0:
            return 0
        other = self.tiles.shared_bytes(element_bytes, element_bytes) \
            - tiles.stages * rows * cols * element_bytes
        limit = self.threads.max_shared_bytes_per_block
        padded = tiles.stages * rows * (cols + best) * element_bytes
        return best if limit is None or other + padded + self._other_pad_bytes(name) <= limit \
            else 0

    def _other_pad_bytes(self, name: str) -> int:
        """The padding bytes of the operand tile built before ``name``'s (A's, for B)."""
        a = getattr(self, "a", None)
        if name != "B" or a is None:
            return 0
        return self.tiles.stages * a.tile.shape[1] * a.pad * a.tile.dtype.bytes

    def _lanes(self, dtype: DType) -> int:
        async_bytes = self.threads.async_copy_bytes
        if self.tiles.stages == 2 and async_bytes is not None:
            return max(1, async_bytes // dtype.bytes)
        if not self.options.allows(LoopKind.VECTOR):
            return 1
        return self.options.lanes(dtype)

    def _contiguous(self, probe: Expr, param: Buffer) -> str | None:
        """Which flat coordinate (``"s"`` or ``"k"``) walks the operand's last dimension with
        unit stride and appears nowhere else, if one does."""
        if not isinstance(probe, BufferLoad) or probe.buffer is not param:
            return None
        *outer, last = probe.indices
        form = affine(last)
        if form is None:
            return None
        terms = form.terms()
        for key in ("s", "k"):
            var = self.flat[key]
            if terms.get(var) == 1 and not any(var == node for index in outer
                                                for node in _vars(index)):
                return key
        return None

    def _aligned(self, probe: BufferLoad, param: Buffer, lanes: int) -> bool:
        offset: Expr = const(0)
        for index, stride in zip(probe.indices, param.strides()):
            offset = offset + index * stride
        form = affine(simplify(offset))
        if form is None:
            return False
        return form.constant % lanes == 0 and all(
            coef == 1 or coef % lanes == 0 for _, coef in form.coefs) \
            and sum(1 for _, coef in form.coefs if coef % lanes) <= 1

    # the kernel ---------------------------------------------------------------------------
    def kernel(self) -> Kernel:
        tiles = self.tiles
        grid_axis = min((a for a in self.threads.axes if a.scope is LaunchScope.GRID),
                        key=lambda a: a.dim)
        block_axis = min((a for a in self.threads.axes if a.scope is LaunchScope.BLOCK),
                         key=lambda a: a.dim)
        blocks = self.batch * self.tiles_m * self.tiles_n
        if blocks > grid_axis.max_extent:
            raise LoweringError(f"compute {self.tensor.name}: the GPU contraction template "
                                f"launches {blocks} blocks on {grid_axis.name}, above its limit "
                                f"{grid_axis.max_extent}; use larger BM / BN tiles")
        register = self.options.register_level
        self.acc = Buffer("acc", (tiles.thread_m, tiles.thread_n), DType.FLOAT32, level=register)
        self.a_frag = Buffer("a_frag", (tiles.thread_m,), self.a.param.dtype, level=register)
        self.b_frag = Buffer("b_frag", (tiles.thread_n,), self.b.param.dtype, level=register)
        self.b_index = self._div(self.block, self.tiles_m * self.tiles_n)
        self.m_index = self._mod(self._div(self.block, self.tiles_n), self.tiles_m)
        self.n_index = self._mod(self.block, self.tiles_n)
        self.thread_m = self._div(self.thread, tiles.threads_n)
        self.thread_n = self._mod(self.thread, tiles.threads_n)
        per_thread = Seq((self._zero_acc(), self._k_loop(), self._epilogue()))
        body: Stmt = For(self.thread, const(tiles.threads), LoopKind.BOUND,
                         Allocate(self.acc, Allocate(self.a_frag, Allocate(self.b_frag,
                                                                           per_thread))),
                         axis=block_axis.name)
        body = Allocate(self.a.tile, Allocate(self.b.tile, body))
        body = For(self.block, const(blocks), LoopKind.BOUND, body, axis=grid_axis.name)
        shared = self.a.tile.nbytes + self.b.tile.nbytes
        return Kernel(self.kernel_name(), tuple(self.params.values()), (self.out.name,), body,
                      launch=LaunchConfig(grid=(blocks,), block=(tiles.threads,),
                                          shared_bytes=shared),
                      attrs={"compute": self.tensor.name, "strategy": "gpu_contraction",
                             "statement": self.tensor.statement(),
                             "tiles": tiles.as_config(),
                             "vector_lanes": {"A": self.a.lanes, "B": self.b.lanes},
                             "row_padding": {"A": self.a.pad, "B": self.b.pad}})

    def _div(self, expr: Expr, by: int) -> Expr:
        return const(0) if by == 0 else expr if by == 1 else expr // by

    def _mod(self, expr: Expr, by: int) -> Expr:
        return const(0) if by == 1 else expr % by

    def _loop(self, var: Var, extent: int, body: Stmt) -> Stmt:
        kind = LoopKind.UNROLLED if self.options.allows(LoopKind.UNROLLED) else LoopKind.SERIAL
        return For(var, const(extent), kind, body)

    def _zero_acc(self) -> Stmt:
        i, j = Var("zi"), Var("zj")
        return self._loop(i, self.tiles.thread_m, self._loop(
            j, self.tiles.thread_n, Store(self.acc, (i, j), const(0.0, DType.FLOAT32))))

    # the k loop ---------------------------------------------------------------------------
    def _barrier(self) -> Barrier:
        """A barrier of the whole block, in the scope the hierarchy names it (``block`` on
        CUDA, ``work_group`` in OpenCL)."""
        return Barrier(block_barrier_scope(self.threads))

    def _stage_index(self) -> Expr:
        return self.kt % 2 if self.tiles.stages == 2 else const(0)

    def _k_loop(self) -> Stmt:
        stage = self._stage_index()
        if self.tiles.stages == 1:
            body = Seq((self._load(self.a, stage, False), self._load(self.b, stage, False),
                        self._barrier(), self._compute(stage), self._barrier()))
            return For(self.kt, const(self.k_steps), LoopKind.SERIAL, body)
        copy = Seq((self._load(self.a, stage, True), self._load(self.b, stage, True),
                    CommitGroup()))
        wait = IfThenElse(self.kt + 1 < self.k_steps, WaitGroup(1), WaitGroup(0))
        compute = Seq((wait, self._barrier(), self._compute(stage), self._barrier()))
        return Pipeline(self.kt, const(self.k_steps), (copy, compute), depth=2,
                        buffers=(self.a.tile, self.b.tile))

    def _load(self, op: _Operand, stage: Expr, asynchronous: bool) -> Stmt:
        """All threads copy the operand's slice ``kt`` into its tile, chunk by chunk."""
        tiles = self.tiles
        _, rows, cols = op.tile.shape
        cols -= op.pad
        lanes = op.lanes
        per_row = cols // lanes
        chunks = rows * per_row
        count = _ceil_div(chunks, tiles.threads)
        it = Var(f"{op.name}_chunk")
        chunk = self.thread if count == 1 else it * tiles.threads + self.thread
        row = simplify(self._div(chunk, per_row))
        col = simplify(self._mod(chunk, per_row) * lanes)
        spatial0 = (self.m_index if op is self.a else self.n_index) * op.block
        k0 = self.kt * tiles.block_k
        row_start, col_start = (k0, spatial0) if op.k_rows else (spatial0, k0)
        row_extent, col_extent = (self.k, op.extent) if op.k_rows else (op.extent, self.k)
        g_row = simplify(row_start + row)
        row_ragged = row_extent % rows != 0
        if lanes > 1:
            stmt = self._chunk(op, stage, row, col, g_row, simplify(col_start + col), row_extent,
                               row_ragged, col_extent if col_extent % cols else None,
                               asynchronous)
        else:
            stmt = self._element(op, stage, row, col, g_row, simplify(col_start + col),
                                 row_extent, col_extent, asynchronous)
        if chunks % tiles.threads:
            stmt = IfThenElse(chunk < chunks, stmt)
        return stmt if count == 1 else For(it, const(count), LoopKind.SERIAL, stmt)

    def _address(self, op: _Operand, g_row: Expr, g_col: Expr) -> Expr:
        spatial, k = (g_col, g_row) if op.k_rows else (g_row, g_col)
        return self.element(op.load, op.axes, self.b_index, spatial, k)

    @staticmethod
    def _clamp(expr: Expr, extent: int) -> Expr:
        return tf.min(expr, const(extent - 1))

    def _chunk(self, op: _Operand, stage: Expr, row: Expr, col: Expr, g_row: Expr,
               g_col: Expr, row_extent: int, row_ragged: bool, col_extent: int | None,
               asynchronous: bool) -> Stmt:
        """``lanes`` contiguous elements: one 128-bit (asynchronous) copy, zeros past the
        last row — and, where the contiguous axis does not divide by its tile
        (``col_extent``, which the lanes divide), zeros for the chunks past its end: every
        chunk is wholly inside or wholly outside, and its start is clamped to the last chunk
        as ``min(chunk, last) * lanes`` so that the address stays in bounds and provably a
        multiple of the lanes."""
        lanes = op.lanes
        safe_row = self._clamp(g_row, row_extent) if row_ragged else g_row
        safe_col = g_col
        outside: list[Expr] = [g_row >= row_extent] if row_ragged else []
        if col_extent is not None:
            safe_col = tf.min(g_col // lanes, const(col_extent // lanes - 1)) * lanes
            outside.append(g_col >= col_extent)
        v = Var(f"{op.name}_lane")
        if asynchronous:
            start = self._address(op, safe_row, safe_col)
            assert isinstance(start, BufferLoad)
            extents = (1,) * (op.param.ndim - 1) + (lanes,)
            copy: Stmt = AsyncCopy(Region(op.tile, (stage, row, col), (1, 1, lanes)),
                                   Region(op.param, start.indices, extents))
        else:
            copy = For(v, const(lanes), LoopKind.VECTOR,
                       Store(op.tile, (stage, row, simplify(col + v)),
                             self._address(op, safe_row, simplify(safe_col + v))), lanes=lanes)
        if not outside:
            return copy
        zeros = self._loop(v, lanes, Store(op.tile, (stage, row, simplify(col + v)),
                                           const(0.0, op.tile.dtype)))
        # the zeros first: the verifier reads the branches in order, as if both ran
        return IfThenElse(_any(outside), zeros, copy)

    def _element(self, op: _Operand, stage: Expr, row: Expr, col: Expr, g_row: Expr,
                 g_col: Expr, row_extent: int, col_extent: int, asynchronous: bool) -> Stmt:
        """One element, zero outside the operand (an asynchronous 4-byte copy where the
        chip has them and the element is 4 bytes)."""
        inside, outside, safe = [], [], []
        for coordinate, extent, tile_extent in ((g_row, row_extent, op.tile.shape[1]),
                                                (g_col, col_extent, op.tile.shape[2] - op.pad)):
            ragged = extent % tile_extent != 0
            if ragged:
                inside.append(coordinate < extent)
                outside.append(coordinate >= extent)
            safe.append(self._clamp(coordinate, extent) if ragged else coordinate)
        value = self._address(op, safe[0], safe[1])
        target = (stage, row, col)
        if asynchronous and op.param.dtype.bytes == 4:
            assert isinstance(value, BufferLoad)
            copy: Stmt = AsyncCopy(Region(op.tile, target, (1, 1, 1)),
                                   Region(op.param, value.indices, (1,) * op.param.ndim))
            if not outside:
                return copy
            return IfThenElse(_any(outside), Store(op.tile, target, const(0.0, op.tile.dtype)),
                              copy)
        if inside:
            value = Select(_all(inside), value, const(0.0, op.tile.dtype))
        return Store(op.tile, target, value)

    # the compute and the epilogue ------------------------------------------------------------
    def _compute(self, stage: Expr) -> Stmt:
        tiles = self.tiles
        kk, i, j = Var("kk"), Var("i"), Var("j")
        row = self.thread_m * tiles.thread_m + i
        col = self.thread_n * tiles.thread_n + j

        def tile_at(op: _Operand, position: Expr) -> Expr:
            indices = (stage, kk, position) if op.k_rows else (stage, position, kk)
            return BufferLoad(op.tile, tuple(simplify(x) for x in indices))

        fill_a = self._fill(self.a, i, tiles.thread_m,
                            Store(self.a_frag, (i,), tile_at(self.a, row)))
        fill_b = self._fill(self.b, j, tiles.thread_n,
                            Store(self.b_frag, (j,), tile_at(self.b, col)))
        product = (BufferLoad(self.a_frag, (i,)).astype(DType.FLOAT32)
                   * BufferLoad(self.b_frag, (j,)).astype(DType.FLOAT32))
        update = self._loop(i, tiles.thread_m, self._loop(
            j, tiles.thread_n, Store(self.acc, (i, j), product, accumulate=ReduceOp.SUM)))
        return self._loop(kk, tiles.block_k, Seq((fill_a, fill_b, update)))

    def _fill(self, op: _Operand, var: Var, extent: int, store: Store) -> Stmt:
        """A fragment's fill from its tile: a vector loop of 128-bit reads where the fragment
        runs along the tile's rows (``k_rows``) in whole 16-byte pieces at 16-byte aligned
        offsets (the tile's row length and the fragment length divide by the lanes), an
        unrolled loop of single reads otherwise."""
        lanes = 16 // op.tile.dtype.bytes
        if op.k_rows and extent % lanes == 0 and op.tile.shape[2] % lanes == 0 \
                and self.options.allows(LoopKind.VECTOR):
            return For(var, const(extent), LoopKind.VECTOR, store, lanes=lanes)
        return self._loop(var, extent, store)

    def _epilogue(self) -> Stmt:
        tiles = self.tiles
        i, j = Var("ei"), Var("ej")
        g_m = simplify(self.m_index * tiles.block_m + self.thread_m * tiles.thread_m + i)
        g_n = simplify(self.n_index * tiles.block_n + self.thread_n * tiles.thread_n + j)
        conditions = []
        safe = []
        for coordinate, extent, block in ((g_m, self.m, tiles.block_m),
                                          (g_n, self.n, tiles.block_n)):
            ragged = extent % block != 0
            if ragged:
                conditions.append(coordinate < extent)
            safe.append(self._clamp(coordinate, extent) if ragged else coordinate)
        values: dict[IterVar, Expr] = {axis: const(0) for axis in self.tensor.axes}
        values.update(_unflatten(self.b_index, self.c.batch_axes))
        values.update(_unflatten(safe[0], self.c.m_axes))
        values.update(_unflatten(safe[1], self.c.n_axes))
        indices = tuple(simplify(substitute(index, values)) for index in self.c.outputs)
        value = BufferLoad(self.acc, (i, j)).astype(self.out.dtype)
        store: Stmt = Store(self.out, indices, value)
        if conditions:
            store = IfThenElse(_all(conditions), store)
        return self._loop(i, tiles.thread_m, self._loop(j, tiles.thread_n, store))


def _vars(expr: Expr) -> list[Var]:
    from tilecraft.kernel_ir.nodes import walk_expr

    return [node for node in walk_expr(expr) if isinstance(node, Var)]
