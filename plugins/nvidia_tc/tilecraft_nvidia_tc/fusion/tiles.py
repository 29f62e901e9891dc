"""Tiles of the fused chain kernel: Chimera's solver (:func:`tilecraft.fusion.solve_chain`,
Eq. 3.14-3.21) on two levels, the registers of a warp and the shared memory of a block (Eq.
3.20-3.21, :func:`plan_chain_tiles`), then the block's exact resources checked against the
spec's limits per block and per thread.

A block computes ``TM`` rows and ``TN`` columns of ``E`` (one batch; ``TN`` = all of ``N``
unless that does not fit): for each step of ``TL`` columns of the intermediate it stages
``D``'s ``TL x TN`` tile and computes ``S = A @ B`` (float32) — with ``A``'s ``TM x K`` tile
staged once and kept, or, where ``K`` is too large for that, ``A``'s and ``B``'s ``TK``-wide
slices staged one after the other and ``S`` accumulated over them — turns ``S`` into the
float16 ``P`` (the online softmax for attention) and accumulates ``O += P @ D``: in a float32
``TM x TN`` tile of shared memory, or (no softmax, each warp's share within the registers'
tile) in the warps' WMMA accumulator fragments across all steps. Each warp computes
``(16 FM) x (16 FN)`` tiles as an outer product of WMMA fragments (§3.4.1.2): ``TM`` is a
multiple of ``16 FM``, ``TL`` and the padded ``TN`` of ``16 FN``, ``TK`` of 16.

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
    buffers; ``tk`` the columns of ``A`` (rows of ``B``) staged at once and ``tn`` the columns
    of ``E`` a block computes (0: all of ``K`` / ``N``); ``o_frags``: the ``O`` micro-kernel
    tiles each warp keeps in registers across the steps (0: ``O`` in shared memory)."""

    tm: int
    tl: int
    fm: int = 2
    fn: int = 2
    warps: int = 4
    #: 2: B and D tiles double-buffered, the next step's copied by cp.async during this one
    stages: int = 1
    tk: int = 0
    tn: int = 0
    o_frags: int = 0

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def registers_per_thread(self) -> int:
        """The estimate: ``fm x fn`` float32 accumulators (8 registers each per lane), ``fm``
        A and ``fn`` B float16 fragments (4 each), ``o_frags`` more grids of accumulators
        for ``O`` in registers, plus addresses and counters."""
        return (self.fm * self.fn * 8 * (1 + self.o_frags) + (self.fm + self.fn) * 4
                + REGISTER_OVERHEAD)


def _round(value: int, unit: int) -> int:
    return math.ceil(value / unit) * unit


@dataclass(frozen=True)
class SharedLayout:
    """Leading dimensions (elements) and byte offsets of the block's shared tiles; ``kp`` the
    (padded) width of the staged ``A`` chunk, ``np_`` of the block's ``N`` tile. With ``O`` in
    registers its final store goes through ``S``'s buffer when that is wide enough."""

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
        kp = _round(min(tiles.tk, k) if tiles.tk else k, FRAGMENT)
        np_ = _round(min(tiles.tn, n) if tiles.tn else n, FRAGMENT * tiles.fn)
        lda, ldb, ldp, ldd = kp + SKEW_HALVES, tiles.tl + SKEW_HALVES, tiles.tl + SKEW_HALVES, \
            np_ + SKEW_HALVES
        lds, ldo = tiles.tl + SKEW_FLOATS, np_ + SKEW_FLOATS
        alias = tiles.o_frags > 0 and ldo <= lds
        sizes = {"A": 2 * tiles.tm * lda, "B": 2 * kp * ldb * tiles.stages,
                 "S": 4 * tiles.tm * lds, "P": 2 * tiles.tm * ldp,
                 "D": 2 * tiles.tl * ldd * tiles.stages, "O": 0 if alias else 4 * tiles.tm * ldo,
                 "rows": 4 * tiles.tm * (2 if softmax else 0)}
        offsets, total = {}, 0
        for name, size in sizes.items():
            offsets[name] = total
            total += _round(size, 128)   # WMMA wants 32-byte aligned tiles
        if alias:
            offsets["O"] = offsets["S"]
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
            or tiles.fn < 1 or tiles.warps < 1 or tiles.stages not in (1, 2) \
            or tiles.tk % FRAGMENT or tiles.tn % (FRAGMENT * tiles.fn) or tiles.o_frags < 0:
        raise FusedResourceError(
            f"kernel {kernel}: tiles {tiles} do not suit the {tiles.fm}x{tiles.fn} WMMA "
            f"micro-kernel: TM must be a multiple of {FRAGMENT * tiles.fm} and TL of "
            f"{FRAGMENT * tiles.fn}, TK of {FRAGMENT} and TN of {FRAGMENT * tiles.fn} (0: whole), "
            "stages 1 or 2")
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


def _shared_budget(spec: TargetSpec, blocks_per_sm: int) -> int:
    """The shared memory one block may use with ``blocks_per_sm`` blocks resident on an SM:
    the per-block opt-in limit, and the SM's shared memory (this spec's chip, the first of
    ``threads.residency``) shared out, less the bytes reserved per block."""
    threads = spec.threads
    assert threads is not None
    limit = threads.shared_bytes_per_block_optin or threads.shared_bytes_per_block or 49152
    if threads.residency:
        chip = threads.residency[0]
        per_sm = chip.shared_bytes // blocks_per_sm - (chip.shared_bytes_reserved_per_block or 0)
        limit = min(limit, per_sm // (chip.shared_allocation_unit or 1)
                    * (chip.shared_allocation_unit or 1))
    return limit


def _register_budget(spec: TargetSpec, warps: int, blocks_per_sm: int) -> int:
    """32-bit registers per thread with ``blocks_per_sm`` blocks of ``warps`` warps resident:
    the per-thread limit and the SM's (or block's) register file shared out."""
    threads = spec.threads
    assert threads is not None
    budget = threads.max_registers_per_thread or 255
    per_sm = threads.residency[0].registers if threads.residency else None
    per_block = threads.registers_per_block
    if per_sm:
        per_block = min(per_block or per_sm, per_sm // blocks_per_sm)
    if per_block:
        budget = min(budget, per_block // (32 * warps))
    return budget


def _fits(tiles: ChainTiles, chain: FusedChain, spec: TargetSpec, blocks_per_sm: int = 1) -> bool:
    """Whether ``tiles`` pass :func:`check_resources` with ``blocks_per_sm`` blocks on an SM."""
    layout = SharedLayout.of(tiles, chain.k, chain.n, chain.softmax)
    if layout.total_bytes > _shared_budget(spec, blocks_per_sm) or tiles.registers_per_thread \
            > _register_budget(spec, tiles.warps, blocks_per_sm):
        return False
    try:
        check_resources("probe", tiles, layout, spec)
    except FusedResourceError:
        return False
    return True


def _gemm_chain(chain: FusedChain):
    """Chimera's chain of the two products the kernel computes, ``T[b] = A[b] @ B[b]`` and
    ``E[b] = T[b] @ D[b]`` (a convolution chain's implicit GEMMs; the middle left out: the
    online softmax needs no whole rows of ``T``, unlike the graph's softmax)."""
    from tilecraft import te
    from tilecraft.fusion import chain_from_computes

    batch, m, k, l_, n = chain.shape
    a = te.placeholder((batch, m, k), name="A", dtype="float16")
    b = te.placeholder((batch, k, l_), name="B", dtype="float16")
    d = te.placeholder((batch, l_, n), name="D", dtype="float16")
    r1, r2 = te.reduce_axis(k, name="kk"), te.reduce_axis(l_, name="ll")
    t = te.compute((batch, m, l_), lambda z, i, j: te.sum(a[z, i, r1] * b[z, r1, j], axis=r1),
                   name="T")
    e = te.compute((batch, m, n), lambda z, i, j: te.sum(t[z, i, r2] * d[z, r2, j], axis=r2),
                   name="E")
    return chain_from_computes([t, e])


def _chain_loops(core) -> dict[str, str]:
    """The solver's names of the chain's loops: ``m``, ``n``, ``l``, ``k`` and ``batch``."""
    last = core.ops[-1]
    indices = last.output.indices
    loops = {"m": indices[-2].loops[0], "n": indices[-1].loops[0],
             "l": last.reduce_loops[0], "k": core.ops[0].reduce_loops[0]}
    if len(indices) == 3 and indices[0].loops:
        loops["batch"] = indices[0].loops[0]
    return loops


#: the solver sizes every tile in the chain's float16; the kernel holds S and O as float32,
#: P besides S, and double-buffers B and D: the solver gets this share of each budget, the
#: exact layout and registers are checked (and the tiles shrunk) after it
SOLVER_SHARE = 0.5


def plan_chain_tiles(chain: FusedChain, spec: TargetSpec, fm: int = 2, fn: int = 2,
                     blocks_per_sm: int = 1) -> tuple[ChainTiles | None, str]:
    """The tiles of ``chain`` (module docstring) from Chimera's solver on two levels (Eq.
    3.20-3.21), innermost first, the outer level's tiles multiples of the inner's:

    - registers (the spec's ``fragment`` level): a warp's tile is the micro-kernel's
      ``16 fm x 16 fn`` (one 16-deep step of ``K`` or ``L``); the solver sizes its ``N``
      tile in the registers a thread may use (``threads.max_registers_per_thread``, the
      register file over the resident warps): the columns of ``O`` a warp can accumulate in
      registers. Without a softmax (whose rescale by row needs ``O`` where rows are known)
      ``O`` stays in registers when each warp's share fits that tile;
    - shared memory (the block): ``TM``, ``TL``, ``TK``, ``TN`` under the shared memory a
      block may use with ``blocks_per_sm`` blocks on an SM, the blocks (batch x row tiles x
      column tiles) spread over the SMs at the Tensor Cores' rate; ``K`` and ``N`` are tiled
      only when that moves fewer bytes or nothing whole fits.

    ``None`` and why when no tile fits."""
    from tilecraft.fusion import FusionError, LoopConstraint, ParallelExecution, solve_chain

    rows, cols = FRAGMENT * fm, FRAGMENT * fn
    try:
        core = _gemm_chain(chain)
    except FusionError as err:
        return None, f"the fusion planner cannot model the chain: {err}"
    loops = _chain_loops(core)
    m_loop, n_loop, l_loop, k_loop = loops["m"], loops["n"], loops["l"], loops["k"]
    one_batch = {loops["batch"]: LoopConstraint(maximum=1)} if "batch" in loops else {}
    levels = {level.name: level for level in spec.memory.levels}
    warps_guess = 4
    # registers: the warp's tile, N sized by the solver
    reg_budget = _register_budget(spec, warps_guess, blocks_per_sm)
    reg_bytes = 4 * 32 * (reg_budget - REGISTER_OVERHEAD - (fm + fn) * 4 - fm * fn * 8)
    n_reg, reg_cycles = 0, 0.0
    reg_note = "O in shared memory"
    if reg_bytes > 0:
        exact = {m_loop: LoopConstraint(rows, rows, rows), l_loop: LoopConstraint(cols, cols,
                                                                                  cols),
                 k_loop: LoopConstraint(FRAGMENT, FRAGMENT, FRAGMENT),
                 n_loop: LoopConstraint(multiple_of=cols), **one_batch}
        inner = solve_chain(core, capacity_bytes=reg_bytes * SOLVER_SHARE, constraints=exact)
        if inner.fused:
            n_tile = inner.tiles[n_loop]
            n_reg = _round(chain.n, cols) if n_tile >= chain.n else n_tile // cols * cols
            reg_level = levels.get("fragment")
            bw = reg_level.bandwidth_bytes_per_cycle if reg_level is not None else None
            # the level's bandwidth is one sub-partition's: the chip has SMs x fan-out of them
            shared_fan_out = levels["shared"].fan_out if "shared" in levels else None
            units = spec.compute.cores * (shared_fan_out or 4)
            reg_cycles = inner.level.volume_bytes / (bw * units) if bw else 0.0
            reg_note = (f"registers: a warp's {rows}x{cols} tile, {n_reg} columns of O "
                        f"({inner.level.volume_bytes:,.0f} bytes moved"
                        + (f", {reg_cycles:,.0f} cycles" if bw else "") + ")")
    # shared memory: the block's tiles
    budget = _shared_budget(spec, blocks_per_sm)
    shared = levels.get(spec.threads.shared_level if spec.threads else "shared") \
        or levels.get("shared")
    if shared is None or not shared.size_bytes:
        return None, f"target {spec.name} has no shared memory level for the fused kernel"
    wmma = spec.intrinsic("wmma_m16n16k16_f16_f32")
    # per SM: 4 sub-partitions, each issuing throughput_per_cycle 16x16x16 mma per clock,
    # shared by the resident blocks
    tensor_flops = 2 * 16 ** 3 * (wmma.throughput_per_cycle or 0.25) * 4
    parallel = ParallelExecution(loops=(*one_batch, m_loop, n_loop),
                                 units=spec.compute.cores * blocks_per_sm,
                                 flops_per_cycle=float(tensor_flops) / blocks_per_sm)
    fraction = min(1.0, budget * SOLVER_SHARE / shared.size_bytes)

    def make(tm: int, tl: int, tk: int, tn: int) -> ChainTiles:
        warps = _warps(tm, tl, fm, fn)
        stages = 2 if vector_staging(chain) and not tk else 1
        o_frags = 0
        if not chain.softmax and n_reg:
            width = _round(min(tn, chain.n) if tn else chain.n, cols)
            per_warp = math.ceil((tm // rows) * (width // cols) / warps)
            if per_warp * cols <= n_reg:
                o_frags = per_warp
        candidate = ChainTiles(tm, tl, fm, fn, warps, stages, tk, tn, o_frags)
        if o_frags and not _fits(candidate, chain, spec, blocks_per_sm):
            candidate = ChainTiles(tm, tl, fm, fn, warps, stages, tk, tn, 0)
        return candidate

    # The kernel keeps A's tile across the steps of L only with K whole, and a block over a
    # slice of N recomputes its rows of the intermediate: the solver's orders see neither, so
    # K and N stay whole where their tiles fit (first try), K is sliced where A's whole tile
    # does not fit (second), then N too (third).
    whys = []
    for slice_k, slice_n in ((False, False), (True, False), (True, True)):
        constraints = {
            m_loop: LoopConstraint(multiple_of=rows, maximum=MAX_TILE),
            l_loop: LoopConstraint(multiple_of=cols, maximum=MAX_TILE),
            # slices of at least 4 fragment steps (each slice costs two barriers)
            k_loop: LoopConstraint(multiple_of=FRAGMENT, minimum=min(chain.k, 4 * FRAGMENT))
            if slice_k else LoopConstraint(minimum=chain.k),
            n_loop: LoopConstraint(multiple_of=cols) if slice_n
            else LoopConstraint(minimum=chain.n), **one_batch}
        solution = solve_chain(core, spec=spec, levels=[shared.name], constraints=constraints,
                               parallel=parallel, capacity_fraction=fraction)
        if not solution.fused:
            whys.append(solution.reason)
            continue
        tiles = solution.tiles
        tm = max(rows, min(tiles[m_loop], MAX_TILE, _round(chain.m, rows)) // rows * rows)
        tl = max(cols, min(tiles[l_loop], MAX_TILE, _round(chain.l, cols)) // cols * cols)
        tk = 0 if tiles[k_loop] >= chain.k else max(FRAGMENT,
                                                    tiles[k_loop] // FRAGMENT * FRAGMENT)
        tn = 0 if tiles[n_loop] >= chain.n else max(cols, tiles[n_loop] // cols * cols)
        # the exact layout and registers: shrink TL, then K's and N's slices, then TM
        candidate = make(tm, tl, tk, tn)
        while not _fits(candidate, chain, spec, blocks_per_sm):
            if tl > cols:
                tl -= cols
            elif slice_k and (tk or _round(chain.k, FRAGMENT)) > FRAGMENT:
                tk = max(FRAGMENT, (tk or _round(chain.k, FRAGMENT)) // 2 // FRAGMENT
                         * FRAGMENT)
            elif slice_n and (tn or _round(chain.n, cols)) > cols:
                tn = max(cols, (tn or _round(chain.n, cols)) // 2 // cols * cols)
            elif tm > rows:
                tm -= rows
            else:
                candidate = None
                break
            candidate = make(tm, tl, tk, tn)
        if candidate is None:
            whys.append(f"{rows} x {cols} tiles" + (" with K" if slice_k else "")
                        + (" and N" if slice_n else "") + (" sliced" if slice_k else
                                                           " whole")
                        + f" exceed the shared memory ({budget} bytes with {blocks_per_sm} "
                        "block(s) per SM) or the registers of a block")
            continue
        # Eq. 3.21: each level's DV / bandwidth from the level outside it; the larger bounds
        shared_cycles = solution.level.cost_cycles
        parts = [solution.reason + (f" ({shared_cycles:,.0f} cycles)" if shared_cycles else ""),
                 reg_note]
        if shared_cycles and reg_cycles:
            neck = "shared" if shared_cycles >= reg_cycles else "registers"
            parts.append(f"bottleneck {neck}")
        if candidate.tk or candidate.tn:
            parts.append(f"K in slices of {candidate.tk or chain.k}, N in tiles of "
                         f"{candidate.tn or chain.n} (whole ones do not fit)")
        return candidate, "; ".join(parts)
    return None, "; ".join(whys)
