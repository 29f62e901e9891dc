"""The tile sizes of the GPU tiled-contraction template (:mod:`.gpu_contraction`): checking a
configuration against the spec's thread hierarchy, the default choice (a cost model of the
most loaded core, :func:`estimate_cycles`, over the tiles that fit), and the search space.

A configuration is ``BM x BN`` outputs per block, ``BK`` reduction values per shared-memory
slice, ``TM x TN`` outputs per thread (its register tile) and ``stages`` shared copies of
each slice (2: double buffering with asynchronous copies). The block runs
``(BM / TM) * (BN / TN)`` threads.

>>> from tilecraft.target.hierarchy import ThreadHierarchy
>>> threads = ThreadHierarchy(axes=[
...     {"name": "blockIdx.x", "scope": "grid", "dim": 0, "max_extent": 65535},
...     {"name": "threadIdx.x", "scope": "block", "dim": 0, "max_extent": 1024}],
...     max_threads_per_block=1024, subgroup_size=32, max_registers_per_thread=255,
...     shared_bytes_per_block=49152, shared_level="shared", async_copy_bytes=16)
>>> default_tiles((1, 512, 512, 512), 4, threads).as_config()   # one core: the largest tile
{'BM': 128, 'BN': 512, 'BK': 8, 'TM': 8, 'TN': 8, 'stages': 2}
>>> tiles = default_tiles((1, 512, 512, 512), 4, threads, ChipRates(cores=108))
>>> tiles.as_config(), tiles.threads   # 64 blocks for 108 cores, latency hidden by 32 warps
({'BM': 64, 'BN': 64, 'BK': 8, 'TM': 2, 'TN': 2, 'stages': 2}, 1024)
>>> default_tiles((1, 1, 100, 64), 2, threads).as_config()   # a gemv: threads along N
{'BM': 1, 'BN': 128, 'BK': 16, 'TM': 1, 'TN': 1, 'stages': 2}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tilecraft.errors import LoweringError

__all__ = ["CONFIG_KEYS", "ChipRates", "ContractionTiles", "bank_conflicts", "check_tiles",
           "default_tiles", "estimate_cycles", "resident_blocks", "row_reduction_cycles",
           "tile_space"]

CONFIG_KEYS = ("BM", "BN", "BK", "TM", "TN", "stages")


@dataclass(frozen=True)
class ContractionTiles:
    """One configuration of the template (module docstring)."""

    block_m: int
    block_n: int
    block_k: int
    thread_m: int
    thread_n: int
    stages: int = 1

    @classmethod
    def from_config(cls, config: Mapping[str, Any], name: str) -> ContractionTiles:
        """The tiles of a ``lower_compute`` config (keys :data:`CONFIG_KEYS`)."""
        unknown = sorted(set(config) - set(CONFIG_KEYS))
        missing = [key for key in CONFIG_KEYS if key not in config and key != "stages"]
        if unknown or missing:
            raise LoweringError(f"compute {name}: the GPU contraction template takes the config "
                                f"keys {', '.join(CONFIG_KEYS)}; got unknown {unknown} and "
                                f"missing {missing}")
        values = {key: config.get(key, 1) for key in CONFIG_KEYS}
        if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values.values()):
            raise LoweringError(f"compute {name}: the GPU contraction template's config "
                                f"{values} must hold positive integers")
        return cls(values["BM"], values["BN"], values["BK"], values["TM"], values["TN"],
                   values["stages"])

    def as_config(self) -> dict[str, int]:
        return {"BM": self.block_m, "BN": self.block_n, "BK": self.block_k,
                "TM": self.thread_m, "TN": self.thread_n, "stages": self.stages}

    @property
    def threads_m(self) -> int:
        return self.block_m // self.thread_m

    @property
    def threads_n(self) -> int:
        return self.block_n // self.thread_n

    @property
    def threads(self) -> int:
        return self.threads_m * self.threads_n

    def shared_bytes(self, a_bytes: int, b_bytes: int) -> int:
        """Shared memory of one block: ``stages`` copies of the A and B slices."""
        return self.stages * self.block_k * (self.block_m * a_bytes + self.block_n * b_bytes)

    def register_words(self, a_bytes: int, b_bytes: int) -> int:
        """32-bit registers of the accumulator tile and the two operand fragments."""
        return (self.thread_m * self.thread_n
                + -(-self.thread_m * a_bytes // 4) + -(-self.thread_n * b_bytes // 4))


def check_tiles(name: str, tiles: ContractionTiles, threads: Any, a_bytes: int,
                b_bytes: int) -> None:
    """A :class:`LoweringError` naming the compute, the limit and the value when ``tiles``
    do not divide or exceed the hierarchy's threads per block, shared memory per block,
    registers per thread, or ask for stages the chip cannot overlap."""
    what = f"compute {name}: the GPU contraction tiles {tiles.as_config()}"
    if tiles.block_m % tiles.thread_m or tiles.block_n % tiles.thread_n:
        raise LoweringError(f"{what}: BM must be a multiple of TM and BN of TN")
    block_axis = min((a for a in threads.axes if a.scope.value == "block"), key=lambda a: a.dim)
    limit = min(threads.max_threads_per_block, block_axis.max_extent)
    if tiles.threads > limit:
        raise LoweringError(f"{what} run {tiles.threads} threads per block, above the limit "
                            f"{limit} (max_threads_per_block / {block_axis.name}); use a "
                            "larger TM x TN or a smaller BM x BN")
    shared = tiles.shared_bytes(a_bytes, b_bytes)
    most = threads.max_shared_bytes_per_block
    if most is not None and shared > most:
        raise LoweringError(f"{what} need {shared} bytes of shared memory per block, above "
                            f"the limit {most} (shared_bytes_per_block_optin / "
                            "shared_bytes_per_block); use a smaller BK, BM, BN or stages=1")
    words = tiles.register_words(a_bytes, b_bytes)
    registers = thread_register_budget(threads, tiles.threads)
    if registers is not None and words > registers:
        raise LoweringError(f"{what} keep {words} 32-bit registers per thread in tiles, above "
                            f"the {registers} a thread of a {tiles.threads}-thread block can "
                            "have (max_registers_per_thread, registers_per_block / threads); "
                            "use a smaller TM x TN or fewer threads")
    if tiles.stages not in (1, 2):
        raise LoweringError(f"{what}: stages must be 1 (plain loads) or 2 (double buffering)")
    if tiles.stages == 2 and threads.async_copy_bytes is None:
        raise LoweringError(f"{what} ask for stages=2, but the thread hierarchy declares no "
                            "asynchronous copies (async_copy_bytes); use stages=1")


def thread_register_budget(threads: Any, count: int) -> int | None:
    """The 32-bit registers each of ``count`` threads of one block can have: the least of
    ``max_registers_per_thread`` and ``registers_per_block / count`` (``None`` when the
    hierarchy declares neither). The code generator's launch bounds make the compiler keep to
    it, spilling the rest, so tiles beyond it are slow rather than unlaunchable.

    >>> from types import SimpleNamespace
    >>> thread_register_budget(SimpleNamespace(max_registers_per_thread=255,
    ...                                        registers_per_block=65536), 1024)
    64
    """
    limits = [limit for limit in (threads.max_registers_per_thread,
                                  threads.registers_per_block // count
                                  if threads.registers_per_block else None)
              if limit is not None]
    return min(limits) if limits else None


def bank_conflicts(byte_offsets: list[int], banks: int, bank_bytes: int) -> int:
    """How many times over one access of a subgroup is served by a banked memory when its
    threads read the elements at ``byte_offsets`` (each within one bank word): the most
    distinct words any one bank must deliver (threads reading the same word share it).

    >>> bank_conflicts([0, 128, 4, 4], 32, 4)   # words 0 and 32 are both in bank 0
    2
    >>> bank_conflicts([0, 192, 4], 32, 4)
    1
    """
    words: dict[int, set[int]] = {}
    for offset in byte_offsets:
        word = offset // bank_bytes
        words.setdefault(word % banks, set()).add(word)
    return max((len(found) for found in words.values()), default=0)


def _pow2_at_least(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


def _fits(tiles: ContractionTiles, threads: Any, element_bytes: int) -> bool:
    try:
        check_tiles("default", tiles, threads, element_bytes, element_bytes)
    except LoweringError:
        return False
    return True


#: 32-bit registers a thread of the template uses besides its tiles (addresses, loop
#: counters, the copy's indices); the 8 x 8 fp16 tile of 72 words compiles to 119 on sm_80
REGISTER_OVERHEAD = 48

#: bytes a shared-memory bank serves per access: a narrower element read (fp16 fragments are
#: read one by one) still takes a whole bank word
SHARED_WORD_BYTES = 4

#: relative slack within which the default prefers the tile that keeps more cores busy
NEAR_BEST = 1.05

#: resident subgroups per core that hide the latency of the shared and global accesses
LATENCY_SUBGROUPS = 8


@dataclass(frozen=True)
class ChipRates:
    """What the default-tile model (:func:`estimate_cycles`) knows of a chip: ``cores``
    (SMs), float32 FMAs per cycle of one core, bytes per cycle of one core's shared memory
    and of the whole chip's global memory, and the residency limits of one core (``None``:
    one block at a time). :meth:`from_spec` reads them from a target spec."""

    cores: int = 1
    fma_per_cycle: float = 64.0
    shared_bytes_per_cycle: float = 128.0
    global_bytes_per_cycle: float = 256.0
    residency: Any = None

    @classmethod
    def from_spec(cls, spec: Any) -> ChipRates:
        """The rates of ``spec`` (``None``: one core of the defaults)."""
        if spec is None:
            return cls()
        from tilecraft.dtypes import DType

        compute = spec.compute
        fma = compute.fma_units_per_core * compute.processing_elements \
            * max(1, compute.lanes(DType.FLOAT32))
        levels = spec.memory.levels
        threads = spec.threads
        shared = next((level for level in levels
                       if threads is not None and level.name == threads.shared_level), None)
        residency = threads.residency[0] if threads is not None and threads.residency else None
        return cls(cores=compute.cores, fma_per_cycle=float(fma),
                   shared_bytes_per_cycle=float(shared.bandwidth_bytes_per_cycle
                                                if shared is not None else 128.0),
                   global_bytes_per_cycle=float(levels[0].bandwidth_bytes_per_cycle),
                   residency=residency)


def resident_blocks(tiles: ContractionTiles, threads: Any, element_bytes: int,
                    chip: ChipRates) -> int:
    """Blocks of ``tiles`` one core holds at once: the least of the residency limits on
    threads, blocks, registers (the tiles' words + :data:`REGISTER_OVERHEAD`, allocated per
    subgroup) and shared memory; 1 without residency limits."""
    limits = chip.residency
    if limits is None:
        return 1
    subgroup = threads.subgroup_size
    subgroups = -(-tiles.threads // subgroup)
    registers = tiles.register_words(element_bytes, element_bytes) + REGISTER_OVERHEAD
    per_subgroup = limits.allocated_registers_per_subgroup(registers, subgroup)
    shared = limits.allocated_shared_bytes(tiles.shared_bytes(element_bytes, element_bytes))
    return max(1, min(limits.max_subgroups(subgroup) // subgroups, limits.max_blocks,
                      limits.registers // (per_subgroup * subgroups),
                      limits.shared_bytes // shared if shared else limits.max_blocks))


def estimate_cycles(tiles: ContractionTiles, extents: tuple[int, int, int, int],
                    element_bytes: int, threads: Any, chip: ChipRates) -> float:
    """Cycles of the most loaded core (Chimera's makespan, :mod:`tilecraft.fusion.parallel`):
    the ``B = batch * ceil(M/BM) * ceil(N/BN)`` blocks are dealt to the cores, one core runs
    ``ceil(B / cores)`` of them, and its time is the largest of

    - its arithmetic: every thread of a (rounded-up) subgroup does ``TM * TN`` FMAs per ``k``,
    - its shared-memory traffic: each thread reads ``TM + TN`` elements per ``k`` (a bank word,
      :data:`SHARED_WORD_BYTES`, each), each block
      writes its ``(BM + BN) * K`` operand slices,
    - its share of the global traffic, ``(BM + BN) * K`` elements per block, at ``1 / cores``
      of the chip's bandwidth,

    divided by how well the resident subgroups hide latency (``min(1, resident subgroups /``
    :data:`LATENCY_SUBGROUPS` ``)``). ``K`` counts whole ``BK`` slices."""
    batch, m, n, k = extents
    blocks = batch * -(-m // tiles.block_m) * -(-n // tiles.block_n)
    per_core = -(-blocks // chip.cores)
    k_padded = -(-k // tiles.block_k) * tiles.block_k
    subgroup = threads.subgroup_size
    lanes = -(-tiles.threads // subgroup) * subgroup
    arithmetic = per_core * lanes * tiles.thread_m * tiles.thread_n * k_padded \
        / chip.fma_per_cycle
    operand_bytes = (tiles.block_m + tiles.block_n) * k_padded * element_bytes
    word = max(element_bytes, SHARED_WORD_BYTES)
    shared = per_core * (lanes * (tiles.thread_m + tiles.thread_n) * k_padded * word
                         + operand_bytes) / chip.shared_bytes_per_cycle
    global_ = per_core * operand_bytes * chip.cores / chip.global_bytes_per_cycle
    resident = min(per_core, resident_blocks(tiles, threads, element_bytes, chip))
    hiding = min(1.0, resident * -(-tiles.threads // subgroup) / LATENCY_SUBGROUPS)
    return max(arithmetic, shared, global_) / hiding


def _candidates(extents: tuple[int, int, int, int], element_bytes: int, threads: Any,
                block_k: int, stages: int) -> list[ContractionTiles]:
    """Every power-of-two tile that fits the limits (registers with
    :data:`REGISTER_OVERHEAD`) and the problem, with whole subgroups where the problem has
    that many outputs per block."""
    _, m, n, _ = extents
    limit = threads.max_threads_per_block
    found = []
    sizes = [1 << i for i in range(11)]
    for thread_m in (1, 2, 4, 8):
        for thread_n in (1, 2, 4, 8):
            if thread_m > _pow2_at_least(m) or thread_n > _pow2_at_least(n):
                continue
            for threads_m in sizes:
                for threads_n in sizes:
                    count = threads_m * threads_n
                    block_m, block_n = threads_m * thread_m, threads_n * thread_n
                    if count > limit or block_m > max(thread_m, _pow2_at_least(m)) \
                            or block_n > max(thread_n, _pow2_at_least(n)):
                        continue
                    tiles = ContractionTiles(block_m, block_n, block_k, thread_m, thread_n,
                                             stages)
                    registers = thread_register_budget(threads, count) or 255
                    if tiles.register_words(element_bytes, element_bytes) \
                            + REGISTER_OVERHEAD <= registers \
                            and _fits(tiles, threads, element_bytes):
                        found.append(tiles)
    whole = [t for t in found if t.threads % threads.subgroup_size == 0]
    return whole or found


def default_tiles(extents: tuple[int, int, int, int], element_bytes: int,
                  threads: Any, chip: ChipRates | None = None) -> ContractionTiles:
    """The default configuration for a contraction of ``(batch, M, N, K)`` with operands of
    ``element_bytes`` on a chip of ``chip``'s rates (``None``: one core): among the
    power-of-two tiles that fit the spec's limits, whole subgroups per block, the one
    :func:`estimate_cycles` finds fastest (fewest cycles, then more threads per block, then a
    squarer register tile); a slice of 32 bytes of ``k`` per row, double buffering where the
    chip copies asynchronously. A gemv (``M = 1``) gets its threads along ``N``."""
    chip = chip or ChipRates()
    _, m, n, k = extents
    block_k = min(max(1, 32 // element_bytes), _pow2_at_least(k))
    stages = 2 if threads.async_copy_bytes is not None else 1
    for slice_k in (block_k, *(block_k >> i for i in range(1, block_k.bit_length()))):
        candidates = _candidates(extents, element_bytes, threads, slice_k, stages)
        if candidates:
            break
    else:
        raise LoweringError("the GPU contraction template fits no tile in the thread "
                            f"hierarchy's limits ({threads.max_threads_per_block} threads, "
                            f"{threads.max_shared_bytes_per_block} shared bytes)")

    cycles = {tiles: estimate_cycles(tiles, extents, element_bytes, threads, chip)
              for tiles in candidates}
    best = min(cycles.values())
    batch = extents[0]

    def rank(tiles: ContractionTiles) -> tuple[int, float, int, int]:
        blocks = batch * -(-m // tiles.block_m) * -(-n // tiles.block_n)
        return (-min(blocks, chip.cores), cycles[tiles], -tiles.threads,
                abs(tiles.thread_m - tiles.thread_n))

    # within NEAR_BEST of the fewest cycles, the tile that keeps the most cores busy
    return min((t for t in candidates if cycles[t] <= best * NEAR_BEST), key=rank)


def row_reduction_cycles(extents: tuple[int, int, int, int], element_bytes: int,
                         threads: Any, chip: ChipRates) -> float:
    """The same model's cycles for the GPU strategy's row reduction of a gemv-like
    contraction (one subgroup per output, its threads splitting ``k``, no shared staging):
    every operand element read once from global memory, the outputs dealt to the cores, the
    latency hidden by the subgroups (one per output) a core holds."""
    batch, m, n, k = extents
    outputs = batch * m * n
    per_core = -(-outputs // chip.cores)
    global_ = per_core * (k + k * min(m, n)) * element_bytes * chip.cores \
        / chip.global_bytes_per_cycle
    arithmetic = per_core * max(k, threads.subgroup_size) / chip.fma_per_cycle
    hiding = min(1.0, per_core / LATENCY_SUBGROUPS)
    return max(global_, arithmetic) / hiding


def tile_space(extents: tuple[int, int, int, int], element_bytes: int, threads: Any) -> Any:
    """The search space over the template's parameters (a :class:`~tilecraft.target.base.
    TemplateSpace`): a register tile and thread arrangement among those that fit the limits
    and the problem, ``BK`` and ``stages``; every point decodes to a valid config."""
    from tilecraft.search import ChoiceSpace, Space
    from tilecraft.target.base import TemplateSpace

    _, m, n, k = extents
    stage_choices = (1, 2) if threads.async_copy_bytes is not None else (1,)
    slices = sorted({min(bk, _pow2_at_least(k)) for bk in (4, 8, 16, 32)})
    tiles = []
    for thread_m in (1, 2, 4, 8):
        for thread_n in (1, 2, 4, 8):
            for threads_m in (1, 2, 4, 8, 16):
                for threads_n in (1, 2, 4, 8, 16, 32):
                    block_m, block_n = threads_m * thread_m, threads_n * thread_n
                    if block_m > max(thread_m, _pow2_at_least(m)) or thread_m > _pow2_at_least(m) \
                            or block_n > max(thread_n, _pow2_at_least(n)) \
                            or thread_n > _pow2_at_least(n):
                        continue
                    widest = ContractionTiles(block_m, block_n, slices[-1], thread_m, thread_n,
                                              stage_choices[-1])
                    if _fits(widest, threads, element_bytes):
                        tiles.append((block_m, block_n, thread_m, thread_n))
    if not tiles:
        default = default_tiles(extents, element_bytes, threads)
        tiles = [(default.block_m, default.block_n, default.thread_m, default.thread_n)]
        slices = [default.block_k]
        stage_choices = (default.stages,)
    space = Space([("tile", ChoiceSpace(tiles)), ("BK", ChoiceSpace(slices)),
                   ("stages", ChoiceSpace(list(stage_choices)))], name="gpu_contraction")

    def decode(point: Any) -> dict[str, int]:
        values = space.values(point)
        block_m, block_n, thread_m, thread_n = values["tile"]
        return ContractionTiles(block_m, block_n, values["BK"], thread_m, thread_n,
                                values["stages"]).as_config()

    return TemplateSpace(space, decode)
