"""Tiles of the fused chain kernel: Chimera's solver (:func:`tilecraft.fusion.solve_chain`,
Eq. 3.14-3.21) on the spec's shared memory, then the block's exact resources checked against
the spec's limits per block and per thread.

A block computes ``TM`` rows of ``E`` (one batch): ``A``'s ``TM x K`` tile stays in shared
memory, and for each step of ``TL`` columns of the intermediate the block stages ``B``'s
``K x TL`` and ``D``'s ``TL x N`` tiles, computes ``S = A @ B`` (float32), turns it into the
float16 ``P`` (the online softmax for attention) and accumulates ``O += P @ D`` in a float32
``TM x N`` tile of shared memory. Each warp computes ``(16 FM) x (16 FN)`` tiles as an outer
product of WMMA fragments (§3.4.1.2): ``TM`` is a multiple of ``16 FM``, ``TL`` and the padded
``N`` of ``16 FN``; ``K`` and ``N`` stay whole.

>>> from tilecraft_nvidia_tc.target import load_target_spec
>>> tiles = ChainTiles(tm=64, tl=64, fm=2, fn=2, warps=4)
>>> layout = SharedLayout.of(tiles, k=64, n=64, softmax=True)
>>> layout.total_bytes, tiles.registers_per_thread
(72192, 96)
>>> check_resources("E_fused", tiles, layout, load_target_spec())
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilecraft.errors import LoweringError
from tilecraft.target.spec import TargetSpec
from tilecraft_nvidia_tc.fusion.chain import FusedChain

__all__ = ["ChainTiles", "FusedResourceError", "SharedLayout", "check_resources",
           "plan_chain_tiles", "vector_staging"]

FRAGMENT = 16
#: 32-bit registers of a thread besides its fragments (the model's REGISTER_OVERHEAD)
REGISTER_OVERHEAD = 48
#: elements of padding at the end of each shared row (fewer bank conflicts of the fragment
#: loads; WMMA needs the leading dimension a multiple of 16 bytes)
SKEW_HALVES, SKEW_FLOATS = 8, 4
#: the most rows / columns of a block's tile (warps and registers stay modest)
MAX_TILE = 128


class FusedResourceError(LoweringError):
    """A fused kernel's tiles ask for more shared memory, registers or threads than the
    spec allows."""


@dataclass(frozen=True)
class ChainTiles:
    """Rows per block ``tm``, intermediate columns per step ``tl``, the micro-kernel's
    fragment grid ``fm x fn`` per warp, the warps of a block and the stages of the B / D
    buffers."""

    tm: int
    tl: int
    fm: int = 2
    fn: int = 2
    warps: int = 4
    #: 2: B and D tiles double-buffered, the next step's copied by cp.async during this one
    stages: int = 1

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def registers_per_thread(self) -> int:
        """The estimate: ``fm x fn`` float32 accumulators (8 registers each per lane), ``fm``
        A and ``fn`` B float16 fragments (4 each), plus addresses and counters."""
        return self.fm * self.fn * 8 + (self.fm + self.fn) * 4 + REGISTER_OVERHEAD


def _round(value: int, unit: int) -> int:
    return math.ceil(value / unit) * unit


@dataclass(frozen=True)
class SharedLayout:
    """Leading dimensions (elements) and byte offsets of the block's shared tiles."""

    kp: int
    np_: int
    lda: int
    ldb: int
    lds: int
    ldp: int
    ldd: int
    ldo: int
    offsets: dict[str, int]
    total_bytes: int

    @classmethod
    def of(cls, tiles: ChainTiles, k: int, n: int, softmax: bool) -> SharedLayout:
        kp, np_ = _round(k, FRAGMENT), _round(n, FRAGMENT * tiles.fn)
        lda, ldb, ldp, ldd = kp + SKEW_HALVES, tiles.tl + SKEW_HALVES, tiles.tl + SKEW_HALVES, \
            np_ + SKEW_HALVES
        lds, ldo = tiles.tl + SKEW_FLOATS, np_ + SKEW_FLOATS
        sizes = {"A": 2 * tiles.tm * lda, "B": 2 * kp * ldb * tiles.stages,
                 "S": 4 * tiles.tm * lds, "P": 2 * tiles.tm * ldp,
                 "D": 2 * tiles.tl * ldd * tiles.stages, "O": 4 * tiles.tm * ldo,
                 "rows": 4 * tiles.tm * (2 if softmax else 0)}
        offsets, total = {}, 0
        for name, size in sizes.items():
            offsets[name] = total
            total += _round(size, 128)   # WMMA wants 32-byte aligned tiles
        return cls(kp, np_, lda, ldb, lds, ldp, ldd, ldo, offsets, total)


def check_resources(kernel: str, tiles: ChainTiles, layout: SharedLayout,
                    spec: TargetSpec) -> None:
    """A :class:`FusedResourceError` naming ``kernel``, the limit and the value when the tiles
    ask for more threads, shared memory or registers than the spec gives a block."""
    threads = spec.threads
    if threads is None:
        raise FusedResourceError(f"kernel {kernel}: target {spec.name} has no threads section; "
                                 "the fused kernel needs its block limits")
    if tiles.tm % (FRAGMENT * tiles.fm) or tiles.tl % (FRAGMENT * tiles.fn) or tiles.fm < 1 \
            or tiles.fn < 1 or tiles.warps < 1 or tiles.stages not in (1, 2):
        raise FusedResourceError(
            f"kernel {kernel}: tiles {tiles} do not suit the {tiles.fm}x{tiles.fn} WMMA "
            f"micro-kernel: TM must be a multiple of {FRAGMENT * tiles.fm} and TL of "
            f"{FRAGMENT * tiles.fn}, stages 1 or 2")
    if tiles.threads > threads.max_threads_per_block:
        raise FusedResourceError(
            f"kernel {kernel}: {tiles.threads} threads per block ({tiles.warps} warps) exceed "
            f"the limit of {threads.max_threads_per_block} (threads.max_threads_per_block); "
            "use fewer warps")
    budget = threads.max_registers_per_thread or 255
    if threads.registers_per_block:
        budget = min(budget, threads.registers_per_block // tiles.threads)
    if tiles.registers_per_thread > budget:
        raise FusedResourceError(
            f"kernel {kernel}: about {tiles.registers_per_thread} registers per thread for the "
            f"{tiles.fm}x{tiles.fn} fragment grid exceed the limit of {budget} (min of "
            "threads.max_registers_per_thread and registers_per_block / threads); use a "
            "smaller fragment grid or fewer warps")
    shared_limit = threads.shared_bytes_per_block_optin or threads.shared_bytes_per_block
    if shared_limit is not None and layout.total_bytes > shared_limit:
        raise FusedResourceError(
            f"kernel {kernel}: {layout.total_bytes} bytes of shared memory per block (TM="
            f"{tiles.tm}, TL={tiles.tl}, K={layout.kp}, N={layout.np_}) exceed the limit of "
            f"{shared_limit} bytes (threads.shared_bytes_per_block_optin); use smaller tiles")


def _warps(tm: int, tl: int, fm: int, fn: int) -> int:
    """One warp per micro-kernel tile of ``S``, between 1 and 8."""
    return max(1, min(8, (tm // (FRAGMENT * fm)) * (tl // (FRAGMENT * fn))))


def vector_staging(chain: FusedChain) -> bool:
    """Whether every row of A, B and D starts 16-byte aligned and holds whole 16-byte chunks
    (K, L, N multiples of 8): then tiles are staged by cp.async, double-buffered."""
    return chain.conv is None and chain.k % 8 == 0 and chain.l % 8 == 0 and chain.n % 8 == 0


def _fits(tm: int, tl: int, fm: int, fn: int, chain: FusedChain, spec: TargetSpec) -> bool:
    tiles = ChainTiles(tm, tl, fm, fn, _warps(tm, tl, fm, fn),
                       2 if vector_staging(chain) else 1)
    try:
        check_resources("probe", tiles, SharedLayout.of(tiles, chain.k, chain.n, chain.softmax),
                        spec)
    except FusedResourceError:
        return False
    return True


def plan_chain_tiles(chain: FusedChain, spec: TargetSpec, fm: int = 2,
                     fn: int = 2) -> tuple[ChainTiles | None, str]:
    """The tiles of ``chain`` (module docstring) from Chimera's solver on the spec's shared
    memory, the blocks (batch x row tiles) spread over the SMs at the Tensor Cores' rate; or
    ``None`` and why no tile fits."""
    from tilecraft.fusion import (
        FusionError,
        LoopConstraint,
        ParallelExecution,
        chain_from_computes,
        gemm_chain,
        solve_chain,
    )

    rows, cols = FRAGMENT * fm, FRAGMENT * fn
    m_top, l_top = min(MAX_TILE, _round(chain.m, rows)), min(MAX_TILE, _round(chain.l, cols))
    tm_max = max((t for t in range(rows, m_top + 1, rows) if _fits(t, cols, fm, fn, chain,
                                                                     spec)), default=0)
    tl_max = max((t for t in range(cols, l_top + 1, cols) if _fits(rows, t, fm, fn, chain,
                                                                     spec)), default=0)
    if not tm_max or not tl_max:
        return None, (f"K = {chain.k} or N = {chain.n} too large: even {rows} x {cols} tiles "
                      "of the fused kernel exceed the shared memory or registers of a block")
    try:
        if chain.conv is not None:  # the implicit GEMM chain the kernel computes
            core = gemm_chain(m=chain.m, n=chain.n, k=chain.k, l=chain.l, dtype="float16")
        else:
            core = chain_from_computes([chain.computes[0], chain.computes[-1]])
    except FusionError as err:
        return None, f"the fusion planner cannot model the chain: {err}"
    last = core.ops[-1]
    indices = last.output.indices
    m_loop, n_loop = indices[-2].loops[0], indices[-1].loops[0]
    l_loop, k_loop = last.reduce_loops[0], core.ops[0].reduce_loops[0]
    constraints = {m_loop: LoopConstraint(multiple_of=rows, maximum=tm_max),
                   l_loop: LoopConstraint(multiple_of=cols, maximum=tl_max),
                   k_loop: LoopConstraint(minimum=chain.k),
                   n_loop: LoopConstraint(minimum=chain.n)}
    parallel_loops = [m_loop]
    if len(indices) == 3 and indices[0].loops:
        batch_loop = indices[0].loops[0]
        constraints[batch_loop] = LoopConstraint(maximum=1)
        parallel_loops.insert(0, batch_loop)
    wmma = spec.intrinsic("wmma_m16n16k16_f16_f32")
    # per SM: 4 sub-partitions, each issuing throughput_per_cycle 16x16x16 mma per clock
    tensor_flops = 2 * 16 ** 3 * (wmma.throughput_per_cycle or 0.25) * 4
    parallel = ParallelExecution(loops=tuple(parallel_loops), units=spec.compute.cores,
                                 flops_per_cycle=float(tensor_flops))
    solution = solve_chain(core, spec=spec, levels=["shared"], constraints=constraints,
                           parallel=parallel)
    if not solution.fused:
        return None, solution.reason
    tm = max(rows, min(solution.tiles[m_loop], tm_max) // rows * rows)
    tl = max(cols, min(solution.tiles[l_loop], tl_max) // cols * cols)
    while tl > cols and not _fits(tm, tl, fm, fn, chain, spec):
        tl -= cols
    while tm > rows and not _fits(tm, tl, fm, fn, chain, spec):
        tm -= rows
    return ChainTiles(tm, tl, fm, fn, _warps(tm, tl, fm, fn),
                      2 if vector_staging(chain) else 1), solution.reason
