"""Computes tensorized onto WMMA through a verified AMOS mapping (thesis ch. 5, §5.4), lowered
as a Tensor Core GEMM kernel with the §3.4.1.2 micro-kernel: each warp holds an ``FM x FN``
outer product of fragments, so every fragment it loads feeds ``FN`` (or ``FM``) ``mma_sync``.

The core's AMOS stages decide which software loops fuse onto the intrinsic's ``i1`` (rows),
``i2`` (columns) and ``r1`` (reduction) and which tensors are ``Src1`` / ``Src2``; the loops
left outside (a batch, a convolution's unmapped reduce loops) become grid blocks or serial
loops. With ``fm x fn x fk`` the intrinsic's shape, ``BM = WARPS_M * FM * fm`` and
``BN = WARPS_N * FN * fn``::

    for block in bound(batch * ceil(M/BM) * ceil(N/BN), axis=blockIdx.x):
      alloc A_s[S][BK/fk][BM][fk + pad], B_s[S][BN/fn][BK][fn + pad],
            C_s[BN/fn][BM][fn + pad] (shared; S = stages, 1 or 2)
      for t in bound(WARPS_M * WARPS_N * 32, axis=threadIdx.x):      # warp w = t / 32
        alloc a[FM], b[FN], acc[FM][FN] (fragment; acc starts at zero)
        for the outer reduce loops (serial):
          S = 1: for kt in serial(ceil(K / BK)): copy(kt, 0); barrier; multiply(0); barrier
          S = 2: pipeline kt (depth 2): stage 0 runs copy(kt, kt % 2) and commits the group;
                 stage 1 waits for it (wait_group 1, the last one wait_group 0), barrier,
                 multiply(kt % 2), barrier — slice kt + 1 is in flight while kt is multiplied
        C_s[wn * FN + j][wm * FM * fm + i * fm ..] <- acc[i][j]   store_matrix_sync; barrier
        out[..] = C_s[..] where in bounds (all threads)

    copy(kt, s): A_s[s], B_s[s] <- the slice kt of Src1 / Src2 (all threads, zeros past the
      edges): 16-byte cp.async chunks where a panel row is contiguous in the operand's tensor
      (a row-major GEMM operand whose row length divides by the chunk), element by element
      otherwise (an im2col convolution operand, a transposed or ragged one)
    multiply(s): for kf in serial(BK / fk):
      a[i] <- A_s[s][kf][wm * FM * fm + i * fm ..]     load_matrix_sync
      b[j] <- B_s[s][wn * FN + j][kf * fk ..]          load_matrix_sync
      acc[i][j] = mma(a[i], b[j], acc[i][j])          mma_sync, FM * FN of them

Every tile is stored in panels one fragment wide (rows of ``fk`` or ``fn`` elements plus 16
bytes of padding), so that every fragment pointer is 256-bit aligned and every leading
dimension a multiple of 16 bytes, as WMMA requires, whatever the fragment shape and dtype.
Ragged edges (a 2 x 3 x 5 GEMM) are zeros in shared memory and guarded global stores.

In Kernel IR the fragments are buffers of the ``fragment`` level allocated per thread, loaded
and stored with ``Copy`` and multiplied with an ``IntrinsicCall`` of the mapping's intrinsic:
the interpreter runs every lane's call by the declared semantics (each lane holds the whole
tile, the same values), the CUDA code generator emits the warp-collective ``nvcuda::wmma``
calls (:mod:`tilecraft_nvidia_tc.codegen.wmma`).

>>> from tilecraft import ops, te
>>> from tilecraft.intrin import generate, match
>>> from tilecraft.lower import LoweringOptions
>>> from tilecraft_nvidia_tc.target import load_target_spec
>>> spec = load_target_spec()
>>> A = te.placeholder((67, 33), "float16", name="A")
>>> B = te.placeholder((33, 45), "float16", name="B")
>>> C = ops.matmul(A, B, out_dtype="float32", name="C")
>>> mma = spec.intrinsic("wmma_m16n16k16_f16_f32")
>>> [kernel] = lower_wmma_mapping(C, generate(C, mma, match(C, mma).mappings[0]),
...                               LoweringOptions.from_spec(spec))
>>> kernel.launch.grid, kernel.launch.block
((2,), (128,))
>>> {name: kernel.attrs["tiles"][name] for name in ("BM", "BN", "BK", "FM", "WARPS_M", "stages")}
{'BM': 64, 'BN': 64, 'BK': 32, 'FM': 2, 'WARPS_M': 2, 'stages': 2}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tilecraft.errors import LoweringError
from tilecraft.intrin.generation import FusedLoop, PhysicalMapping
from tilecraft.intrin.operands import operand_value
from tilecraft.kernel_ir.concurrency import AsyncCopy, CommitGroup, Pipeline, WaitGroup
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Barrier,
    Buffer,
    BufferLoad,
    Copy,
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
    walk_expr,
)
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.intrinsic import IntrinsicDecl, OperandRole
from tilecraft.te import functions as tf
from tilecraft.te.expr import AxisKind, Cast, Const, Expr, IterVar, Load, Var, const
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import transform

__all__ = ["WmmaTiles", "lower_tensor_core_mapping", "lower_wmma_mapping", "mma_sync_shape",
           "supports", "wmma_shape"]

#: WMMA's instruction that loads fragments (the companions multiply, store and fill them)
WMMA_INSTRUCTION = "load_matrix_sync"
#: the instruction that loads an mma.sync intrinsic's operands (a prefix: ldmatrix.sync...)
MMA_SYNC_INSTRUCTION = "ldmatrix"
#: bytes of padding at the end of every panel row (spreads fragment rows over the banks)
ROW_PADDING_BYTES = 16
WARP = 32


@dataclass(frozen=True)
class WmmaTiles:
    """The block tile: ``WARPS_M x WARPS_N`` warps, each an ``FM x FN`` outer product of
    fragments, ``BK`` reduction elements staged per step (a multiple of the fragment's)."""

    warps_m: int = 2
    warps_n: int = 2
    fm: int = 2
    fn: int = 2
    bk: int = 32
    #: 2: the BK slices double-buffered in shared memory (slice ``kt + 1`` copied with
    #: cp.async while slice ``kt`` is multiplied); 1: one buffer, copied then multiplied
    stages: int = 2


def _tensor_core_shape(decl: IntrinsicDecl, loaded_by: Callable[[str], bool]
                       ) -> tuple[str, str, str] | None:
    """The names of the intrinsic's row, column and reduce loops when it has the form
    ``Dst[i1, i2] += Src1[i1, r1] * Src2[r1, i2]`` and an operand move whose instruction
    ``loaded_by`` accepts."""
    compute = decl.compute
    reduce = [loop.name for loop in compute.loops if loop.kind is AxisKind.REDUCE]
    sources = [op for op in compute.operands if op.role is OperandRole.SRC]
    if len(reduce) != 1 or len(sources) != 2 or decl.memory is None or not any(
            move.instruction is not None and loaded_by(move.instruction)
            for move in decl.memory.moves):
        return None
    destination = compute.destination
    if len(destination.index) != 2:
        return None
    row, column = destination.index
    if tuple(sources[0].index) != (row, reduce[0]) or tuple(sources[1].index) != (reduce[0],
                                                                                  column):
        return None
    return row, column, reduce[0]


def wmma_shape(decl: IntrinsicDecl) -> tuple[str, str, str] | None:
    """The names of the intrinsic's row, column and reduce loops when it has WMMA's form
    ``Dst[i1, i2] += Src1[i1, r1] * Src2[r1, i2]`` loaded with ``load_matrix_sync``."""
    return _tensor_core_shape(decl, lambda instruction: instruction == WMMA_INSTRUCTION)


def mma_sync_shape(decl: IntrinsicDecl) -> tuple[str, str, str] | None:
    """The same for a PTX ``mma.sync`` intrinsic (operands loaded with ``ldmatrix``: each lane
    holds its registers of the tile, :mod:`tilecraft_nvidia_tc.codegen.mma_sync`)."""
    return _tensor_core_shape(decl, lambda instruction: instruction.startswith(
        MMA_SYNC_INSTRUCTION))


def supports(decl: IntrinsicDecl) -> bool:
    """Whether ``decl`` is a WMMA- or mma.sync-form intrinsic this lowering handles."""
    return wmma_shape(decl) is not None or mma_sync_shape(decl) is not None


def _seq(stmts: list[Stmt]) -> Stmt:
    return stmts[0] if len(stmts) == 1 else Seq(tuple(stmts))


def _zero(buffer: Buffer) -> Const:
    return Const(0, buffer.dtype) if buffer.dtype.is_int else Const(0.0, buffer.dtype)


def _unflatten(flat: Expr, extents: tuple[int, ...]) -> list[Expr]:
    """Row-major coordinates of ``flat`` over ``extents`` (the last fastest)."""
    values: list[Expr] = []
    stride = 1
    for position, extent in reversed(list(enumerate(extents))):
        value = flat // stride if stride != 1 else flat
        values.append(value % extent if position else value)
        stride *= extent
    return values[::-1]


def _padded_row(elements: int, itemsize: int) -> int:
    """Elements per panel row: ``elements`` plus 16 bytes, a multiple of 16 bytes."""
    return elements + ROW_PADDING_BYTES // itemsize


class _WmmaKernelBuilder:
    """The kernel of one mapping onto a WMMA intrinsic (module docstring)."""

    def __init__(self, compute: Tensor, physical: PhysicalMapping, options: LoweringOptions,
                 tiles: WmmaTiles) -> None:
        virtual = physical.virtual
        self.compute, self.virtual, self.options = compute, virtual, options
        self.decl = virtual.intrinsic
        self.product = virtual.product
        self.mma_sync = wmma_shape(self.decl) is None
        shape = mma_sync_shape(self.decl) if self.mma_sync else wmma_shape(self.decl)
        assert shape is not None
        row, column, reduce = shape
        self.rows, self.columns, self.reduce = (virtual.loop(row), virtual.loop(column),
                                                virtual.loop(reduce))
        self.fm, self.fn, self.fk = self.rows.tile, self.columns.tile, self.reduce.tile
        sources = [op for op in self.decl.compute.operands if op.role is OperandRole.SRC]
        self.src1, self.src2 = sources[0], sources[1]
        self.dst = self.decl.compute.destination
        threads = options.threads
        self.shared = threads.shared_level if threads is not None else "shared"
        self.fragment = options.register_level or "fragment"
        self.subgroup = threads.subgroup_size if threads is not None else WARP
        level = options.param_level
        self.params: dict[str, Buffer] = {}
        for factor in self.product.factors:
            tensor = factor.tensor
            self.params.setdefault(tensor.name, Buffer(tensor.name, tensor.shape, tensor.dtype,
                                                       level=level))
        self.output = Buffer(compute.name, compute.shape, compute.dtype, level=level)
        # smaller problems take fewer warps (never fewer fragments: the outer product stays)
        warps_m = max(1, min(tiles.warps_m, math.ceil(self.rows.extent / (tiles.fm * self.fm))))
        warps_n = max(1, min(tiles.warps_n,
                             math.ceil(self.columns.extent / (tiles.fn * self.fn))))
        if tiles.bk % self.fk:
            raise LoweringError(f"compute {compute.name}: BK={tiles.bk} is not a multiple of "
                                f"{self.decl.name}'s reduction {self.fk}; use a multiple")
        if tiles.stages not in (1, 2):
            raise LoweringError(f"compute {compute.name}: stages={tiles.stages}; the Tensor "
                                "Core kernel stages its slices in 1 or 2 shared buffers")
        #: bytes one asynchronous copy moves (None: the chip has no cp.async)
        self.async_bytes = threads.async_copy_bytes if threads is not None else None
        stages = tiles.stages if self.async_bytes else 1
        self.tiles = WmmaTiles(warps_m, warps_n, tiles.fm, tiles.fn, tiles.bk, stages)
        self.bm = warps_m * tiles.fm * self.fm
        self.bn = warps_n * tiles.fn * self.fn
        #: the width of B's shared panels: one fragment (WMMA); two m16n8 tiles side by side
        #: for mma.sync where the block has an even count (8 halves plus padding against the
        #: lanes' bank conflicts would triple the panel's bytes)
        self.b_panel = 2 * self.fn if self.mma_sync and (self.bn // self.fn) % 2 == 0 \
            else self.fn
        self.threads = warps_m * warps_n * self.subgroup
        spatial = [loop for loop in virtual.outer if loop in self.product.axes]
        self.batch_loops = spatial
        self.reduce_loops = [loop for loop in virtual.outer if loop not in self.product.axes]

    # element values --------------------------------------------------------------------------
    def _operand(self, operand: str, values: Mapping[IterVar, Expr]) -> Expr:
        """The source ``operand``'s element at the software loop values ``values``."""
        return operand_value(self.virtual, self.params, operand, values)

    @staticmethod
    def _clamped(loop: FusedLoop, position: Expr) -> dict[IterVar, Expr]:
        """The software loop values at ``position`` of ``loop`` (clamped into the loop: the
        caller guards the positions past its end)."""
        return loop.split(tf.min(position, const(loop.extent - 1)))

    # the pieces ------------------------------------------------------------------------------
    def _each_element(self, extents: tuple[int, ...], thread: Var, name: str,
                      body: Callable[[list[Expr]], Stmt]) -> Stmt:
        """``body(coordinates)`` for every element of ``extents``, spread over the threads."""
        total = math.prod(extents)
        rounds = -(-total // self.threads)
        step = Var(f"{name}_step")
        flat = step * self.threads + thread
        exact = rounds * self.threads == total
        coordinates = _unflatten(flat if exact else tf.min(flat, const(total - 1)), extents)
        stmt = body(coordinates)
        if not exact:
            stmt = IfThenElse(flat < total, stmt)
        # unrolled: the rounds' global loads are independent, issued before the first is used
        kind = LoopKind.UNROLLED if self.options.allows(LoopKind.UNROLLED) else LoopKind.SERIAL
        return For(step, const(rounds), kind, stmt)

    def _stage(self, buffer: Buffer, operand: str, values: dict[IterVar, Expr],
               spatial: FusedLoop, spatial_base: Expr, k_base: Expr, thread: Var,
               panel_rows: bool, stage: Expr) -> Stmt:
        """Copy one BK slice of a source into its shared panels ``buffer[stage]``, zeros past
        the edges. ``panel_rows``: the panels run along k (``A_s[s][kf][m][k]``) else along
        the spatial axis (``B_s[s][np][k][n]``). Where the pipeline is double-buffered and the
        operand's rows are contiguous in memory (:meth:`_chunked`), 16-byte cp.async copies;
        element by element otherwise."""
        panels, first = buffer.shape[1], buffer.shape[2]
        inner = self.fk if panel_rows else self.b_panel
        chunk = self._chunked(operand, spatial, panel_rows, buffer) \
            if self.tiles.stages == 2 else None
        if chunk is not None:
            return self._stage_async(buffer, operand, values, spatial, spatial_base, k_base,
                                     thread, panel_rows, stage, chunk)

        def body(coordinates: list[Expr]) -> Stmt:
            panel, outer, lane = coordinates
            if panel_rows:  # A_s[s][kf][m][k]
                s_pos, k_pos = spatial_base + outer, k_base + panel * self.fk + lane
            else:           # B_s[s][np][k][n]
                s_pos, k_pos = spatial_base + panel * self.b_panel + lane, k_base + outer
            local = dict(values)
            local.update(self._clamped(spatial, s_pos))
            local.update(self._clamped(self.reduce, k_pos))
            value = self._operand(operand, local)
            if value.dtype != buffer.dtype:
                value = value.astype(buffer.dtype)
            index = (stage, panel, outer, lane)
            return IfThenElse((s_pos < spatial.extent) & (k_pos < self.reduce.extent),
                              Store(buffer, index, value), Store(buffer, index, _zero(buffer)))

        return self._each_element((panels, first, inner), thread, buffer.name, body)

    def _source_load(self, operand: str) -> Load | None:
        """The operand's element as a plain load of a kernel input (casts to its own dtype
        dropped), ``None`` when it is computed (a padded input, a product)."""
        position = self.virtual.mapping.binding(operand).factor
        assert position is not None
        value = self.product.factors[position].value()
        while isinstance(value, Cast):
            value = value.x
        return value if isinstance(value, Load) else None

    def _chunked(self, operand: str, spatial: FusedLoop, panel_rows: bool,
                 buffer: Buffer) -> int | None:
        """Elements per 16-byte cp.async chunk when a panel row of the operand is contiguous
        in its tensor: the loop along the panel row is one software loop, the tensor's last
        index is that loop alone, its extent (the tensor's last) and the panel row divide by
        the chunk; ``None`` otherwise (the slice is copied element by element)."""
        if not self.async_bytes:
            return None
        load = self._source_load(operand)
        along = self.reduce if panel_rows else spatial
        if load is None or load.dtype != buffer.dtype or len(along.software) != 1:
            return None
        chunk = self.async_bytes // buffer.dtype.bytes
        (loop,) = along.software
        inner = self.fk if panel_rows else self.b_panel
        others = [node for index in load.indices[:-1] for node in walk_expr(index)]
        if load.indices[-1] != loop or loop in others \
                or load.tensor.shape[-1] != loop.extent or loop.extent % chunk \
                or inner % chunk or load.tensor.name not in self.params:
            return None
        return chunk

    def _stage_async(self, buffer: Buffer, operand: str, values: dict[IterVar, Expr],
                     spatial: FusedLoop, spatial_base: Expr, k_base: Expr, thread: Var,
                     panel_rows: bool, stage: Expr, chunk: int) -> Stmt:
        """:meth:`_stage` in 16-byte cp.async chunks. A chunk lies wholly inside or wholly
        outside its row (the row's extent divides by it): outside it is zeros; its start is
        clamped into the row as ``min(position / chunk, last) * chunk`` so that the address
        stays in bounds and provably a multiple of the chunk, as cp.async needs."""
        load = self._source_load(operand)
        assert load is not None
        panels, first = buffer.shape[1], buffer.shape[2]
        inner = self.fk if panel_rows else self.b_panel
        along, across = (self.reduce, spatial) if panel_rows else (spatial, self.reduce)
        (loop,) = along.software
        param = self.params[load.tensor.name]

        def body(coordinates: list[Expr]) -> Stmt:
            panel, outer, piece = coordinates
            lane = piece * chunk
            if panel_rows:  # A_s[s][kf][m][k]: rows along k
                along_pos, across_pos = k_base + panel * self.fk + lane, spatial_base + outer
            else:           # B_s[s][np][k][n]: rows along n
                along_pos, across_pos = (spatial_base + panel * self.b_panel + lane,
                                         k_base + outer)
            local = dict(values)
            local.update(self._clamped(across, across_pos))
            local[loop] = tf.min(along_pos // chunk, const(loop.extent // chunk - 1)) * chunk

            def replace(node: Expr) -> Expr | None:
                return local[node] if isinstance(node, IterVar) else None

            indices = tuple(transform(index, replace) for index in load.indices)
            target = (stage, panel, outer, lane)
            copy = AsyncCopy(Region(buffer, target, (1, 1, 1, chunk)),
                             Region(param, indices, (1,) * (param.ndim - 1) + (chunk,)))
            v = Var(f"{buffer.name}_zero")
            zeros = For(v, const(chunk), LoopKind.SERIAL,
                        Store(buffer, (stage, panel, outer, lane + v), _zero(buffer)))
            # the zeros first: the verifier reads the branches in order, as if both ran
            return IfThenElse((across_pos >= across.extent) | (along_pos >= along.extent),
                              zeros, copy)

        return self._each_element((panels, first, inner // chunk), thread, buffer.name, body)

    def _padded_rows(self) -> tuple[int, int, int]:
        """Row lengths of the A, B and C panels: WMMA's 16 bytes of padding (32-byte aligned
        fragments, 16-byte leading dimensions); for mma.sync, whose lanes gather their own
        registers, the padding with the fewest bank conflicts of that gather
        (:func:`tilecraft_nvidia_tc.codegen.mma_sync.padded_row`)."""
        fk, fn = self.fk, self.fn
        if not self.mma_sync:
            return (_padded_row(fk, self.src1.dtype.bytes), _padded_row(fn, self.src2.dtype.bytes),
                    _padded_row(fn, self.dst.dtype.bytes))
        from tilecraft_nvidia_tc.codegen.mma_sync import padded_row

        return (padded_row("matrix_a", fk, self.src1.dtype.bytes),
                padded_row("matrix_b", self.b_panel, self.src2.dtype.bytes),
                padded_row("accumulator", fn, self.dst.dtype.bytes))

    def _check_resources(self, name: str, shared: tuple[Buffer, ...]) -> None:
        """A LoweringError naming the kernel, the spec's limit and the tiles' value when the
        block tile asks for more threads, shared memory or registers than a block gets (the
        registers: the fragments' share of each thread plus the model's overhead for
        addresses and counters)."""
        threads = self.options.threads
        if threads is None:
            return
        from tilecraft_nvidia_tc.model.profile import REGISTER_OVERHEAD

        t = self.tiles
        what = (f"kernel {name}: the block tile ({t.warps_m}x{t.warps_n} warps of {t.fm}x{t.fn} "
                f"{self.fm}x{self.fn}x{self.fk} fragments, BK={t.bk}, stages={t.stages})")
        if self.threads > threads.max_threads_per_block:
            raise LoweringError(f"{what} has {self.threads} threads, above "
                                f"max_threads_per_block {threads.max_threads_per_block}; use "
                                "fewer warps (WARPS_M x WARPS_N)")
        limit = threads.max_shared_bytes_per_block or threads.shared_bytes_per_block
        used = sum(-(-buffer.nbytes // 16) * 16 for buffer in shared)
        if limit is not None and used > limit:
            raise LoweringError(f"{what} needs {used} bytes of shared memory per block, above "
                                f"the limit of {limit}; use smaller tiles (FM, FN, BK, "
                                "stages)")
        lanes = self.subgroup
        words = (t.fm * self.fm * self.fk * self.src1.dtype.bytes
                 + t.fn * self.fk * self.fn * self.src2.dtype.bytes
                 + t.fm * t.fn * self.fm * self.fn * self.dst.dtype.bytes) // (4 * lanes)
        budgets = [threads.max_registers_per_thread] if threads.max_registers_per_thread else []
        if threads.registers_per_block:
            budgets.append(threads.registers_per_block // self.threads)
        if budgets and words + REGISTER_OVERHEAD > min(budgets):
            raise LoweringError(f"{what} needs about {words + REGISTER_OVERHEAD} registers per "
                                f"thread ({words} for fragments), above the {min(budgets)} a "
                                f"thread of a {self.threads}-thread block gets "
                                "(max_registers_per_thread, registers_per_block / threads); "
                                "use fewer fragments per warp (FM x FN)")

    def kernel(self, name: str) -> Kernel:
        src1, src2, dst = self.src1, self.src2, self.dst
        fm, fn, fk, tiles = self.fm, self.fn, self.fk, self.tiles
        kf_count = tiles.bk // fk
        rows = self._padded_rows()
        a_s = Buffer("A_s", (tiles.stages, kf_count, self.bm, rows[0]), src1.dtype,
                     level=self.shared)
        b_s = Buffer("B_s", (tiles.stages, self.bn // self.b_panel, tiles.bk, rows[1]),
                     src2.dtype, level=self.shared)
        c_s = Buffer("C_s", (self.bn // fn, self.bm, rows[2]), dst.dtype, level=self.shared)
        self._check_resources(name, (a_s, b_s, c_s))
        a_frags = [Buffer(f"a_frag{i}", (fm, fk), src1.dtype, level=self.fragment)
                   for i in range(tiles.fm)]
        b_frags = [Buffer(f"b_frag{j}", (fk, fn), src2.dtype, level=self.fragment)
                   for j in range(tiles.fn)]
        accs = [[Buffer(f"acc{i}_{j}", (fm, fn), dst.dtype, level=self.fragment)
                 for j in range(tiles.fn)] for i in range(tiles.fm)]

        m_tiles = -(-self.rows.extent // self.bm)
        n_tiles = -(-self.columns.extent // self.bn)
        batch_extents = tuple(loop.extent for loop in self.batch_loops)
        blocks = math.prod(batch_extents) * m_tiles * n_tiles
        block, thread = Var("block"), Var("t")
        *batch_coordinates, m_block, n_block = _unflatten(block, (*batch_extents, m_tiles,
                                                                  n_tiles))
        values: dict[IterVar, Expr] = dict(zip(self.batch_loops, batch_coordinates))
        reduce_vars = {loop: Var(loop.name) for loop in self.reduce_loops}
        values.update(reduce_vars)
        m_base, n_base = m_block * self.bm, n_block * self.bn
        warp = thread // self.subgroup
        warp_m, warp_n = warp // tiles.warps_n, warp % tiles.warps_n

        kt, kf = Var("kt"), Var("kf")
        k_base = kt * tiles.bk
        k_steps = -(-self.reduce.extent // tiles.bk)
        stage = kt % 2 if tiles.stages == 2 else const(0)
        zero = const(0)
        loads: list[Stmt] = []
        for i, frag in enumerate(a_frags):
            row = (warp_m * tiles.fm + i) * fm
            loads.append(Copy(Region(frag, (zero, zero), (fm, fk)),
                              Region(a_s, (stage, kf, row, zero), (1, 1, fm, fk))))
        per_panel = self.b_panel // fn
        for j, frag in enumerate(b_frags):
            tile = warp_n * tiles.fn + j
            panel, column = (tile // per_panel, tile % per_panel * fn) if per_panel > 1 \
                else (tile, zero)
            loads.append(Copy(Region(frag, (zero, zero), (fk, fn)),
                              Region(b_s, (stage, panel, kf * fk, column), (1, 1, fk, fn))))
        calls = [IntrinsicCall(self.decl.name, (Region(a_frags[i], (zero, zero), (fm, fk)),
                                                Region(b_frags[j], (zero, zero), (fk, fn)),
                                                Region(accs[i][j], (zero, zero), (fm, fn))),
                               (("mapping", str(self.virtual.mapping)),))
                 for i in range(tiles.fm) for j in range(tiles.fn)]
        copies = (
            self._stage(a_s, src1.name, values, self.rows, m_base, k_base, thread, True, stage),
            self._stage(b_s, src2.name, values, self.columns, n_base, k_base, thread, False,
                        stage))
        multiply = For(kf, const(kf_count), LoopKind.SERIAL, Seq((*loads, *calls)))
        body: Stmt
        if tiles.stages == 1:
            body = For(kt, const(k_steps), LoopKind.SERIAL,
                       Seq((*copies, Barrier("block"), multiply, Barrier("block"))))
        else:
            # step t: slice t copied into buffer t % 2 (cp.async, committed), then slice t - 1
            # waited for and multiplied from the other buffer
            wait = IfThenElse(kt + 1 < k_steps, WaitGroup(1), WaitGroup(0))
            body = Pipeline(kt, const(k_steps), (Seq((*copies, CommitGroup())),
                                                 Seq((wait, Barrier("block"), multiply,
                                                      Barrier("block")))),
                            depth=2, buffers=(a_s, b_s))
        for loop in reversed(self.reduce_loops):
            body = For(reduce_vars[loop], const(loop.extent), LoopKind.SERIAL, body)
        stores = [Copy(Region(c_s, (warp_n * tiles.fn + j, (warp_m * tiles.fm + i) * fm, zero),
                              (1, fm, fn)), Region(accs[i][j], (zero, zero), (fm, fn)))
                  for i in range(tiles.fm) for j in range(tiles.fn)]

        def unpack(coordinates: list[Expr]) -> Stmt:
            panel, row, lane = coordinates
            m_pos, n_pos = m_base + row, n_base + panel * fn + lane
            local = dict(values)
            local.update(self._clamped(self.rows, m_pos))
            local.update(self._clamped(self.columns, n_pos))
            value: Expr = BufferLoad(c_s, (panel, row, lane))
            if value.dtype != self.output.dtype:
                value = value.astype(self.output.dtype)
            index = tuple(local[axis] for axis in self.product.axes)
            return IfThenElse((m_pos < self.rows.extent) & (n_pos < self.columns.extent),
                              Store(self.output, index, value))

        work: Stmt = Seq((body, *stores, Barrier("block"),
                          self._each_element((self.bn // fn, self.bm, fn), thread, "out",
                                             unpack)))
        for buffer in reversed([*a_frags, *b_frags, *(acc for row in accs for acc in row)]):
            work = Allocate(buffer, work)  # fragments start at zero (fill_fragment)
        nest: Stmt = For(thread, const(self.threads), LoopKind.BOUND, work, axis="threadIdx.x")
        for buffer in (c_s, b_s, a_s):
            nest = Allocate(buffer, nest)
        nest = For(block, const(blocks), LoopKind.BOUND, nest, axis="blockIdx.x")
        params = (*self.params.values(), self.output)
        t = tiles
        useful = [min(loop.extent, loop.tile) / loop.tile
                  for loop in (self.rows, self.columns, self.reduce)]
        notes = [f"the intrinsic's {name} ({loop.name}) carries no software loop: 1 of "
                 f"{loop.tile} used" + (" (a grouped or depthwise convolution reads its output "
                                        "channels through the group, so they cannot be "
                                        "the columns)" if loop is self.columns else "")
                 for name, loop in (("rows", self.rows), ("columns", self.columns))
                 if not loop.software]
        tile_attrs = {"BM": self.bm, "BN": self.bn, "BK": t.bk, "FM": t.fm, "FN": t.fn,
                      "WARPS_M": t.warps_m, "WARPS_N": t.warps_n, "stages": t.stages}
        return Kernel(name, params, (self.output.name,), nest,
                      launch=LaunchConfig(grid=(blocks,), block=(self.threads,)),
                      attrs={"mapping": str(self.virtual.mapping), "intrinsic": self.decl.name,
                             "tile_utilization": math.prod(useful), "notes": tuple(notes),
                             "strategy": "nvidia_mma_sync" if self.mma_sync else "nvidia_wmma",
                             "tiles": tile_attrs,
                             "schedule": f"tensorized: {self.virtual.mapping} on "
                                         f"{self.decl.name} ({self.bm}x{self.bn}x{t.bk} block "
                                         f"tiles, {t.warps_m}x{t.warps_n} warps of {t.fm}x"
                                         f"{t.fn} fragments)"
                                         + "".join(f"; {note}" for note in notes)})


def default_tiles(decl: IntrinsicDecl) -> WmmaTiles:
    """The block tile the kernel takes by default: 2 x 2 warps of 2 x 2 fragments (WMMA), of
    2 x 4 ``m16n8`` tiles for mma.sync (a 32 x 32 warp tile either way)."""
    return WmmaTiles(fn=4) if wmma_shape(decl) is None else WmmaTiles()


def lower_tensor_core_mapping(compute: Tensor, physical: PhysicalMapping,
                              options: LoweringOptions,
                              tiles: WmmaTiles | None = None) -> list[Kernel] | None:
    """The Tensor Core kernel of ``compute`` through ``physical`` (module docstring) on a WMMA
    or an mma.sync intrinsic, verified against the spec when ``options`` carry one; ``None``
    when the mapping's intrinsic is neither or the mapping is of another compute."""
    decl = physical.virtual.intrinsic
    if not supports(decl) or physical.virtual.product.compute.name != compute.name:
        return None
    builder = _WmmaKernelBuilder(compute, physical, options, tiles or default_tiles(decl))
    kernel = builder.kernel(f"{compute.name}_{decl.name}")
    if options.spec is not None:
        from tilecraft.kernel_ir.verify import verify_kernel

        verify_kernel(kernel, options.spec)
    return [kernel]


def lower_wmma_mapping(compute: Tensor, physical: PhysicalMapping, options: LoweringOptions,
                       tiles: WmmaTiles | None = None) -> list[Kernel] | None:
    """:func:`lower_tensor_core_mapping` for WMMA intrinsics only (``None`` for others)."""
    if wmma_shape(physical.virtual.intrinsic) is None:
        return None
    return lower_tensor_core_mapping(compute, physical, options, tiles)
