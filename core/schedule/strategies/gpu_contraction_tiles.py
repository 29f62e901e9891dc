"""The tile sizes of the GPU tiled-contraction template (:mod:`.gpu_contraction`): checking a
configuration against the spec's thread hierarchy, the default choice, and the search space.

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
>>> tiles = default_tiles((1, 512, 512, 512), 4, threads)
>>> tiles.as_config(), tiles.threads
({'BM': 128, 'BN': 128, 'BK': 8, 'TM': 8, 'TN': 8, 'stages': 2}, 256)
>>> default_tiles((1, 1, 100, 64), 2, threads).as_config()
{'BM': 1, 'BN': 128, 'BK': 16, 'TM': 1, 'TN': 8, 'stages': 2}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tilecraft.errors import LoweringError

__all__ = ["CONFIG_KEYS", "ContractionTiles", "check_tiles", "default_tiles", "tile_space"]

CONFIG_KEYS = ("BM", "BN", "BK", "TM", "TN", "stages")

#: threads per block the default aims for: eight warps of 32 (FlexTensor's usual start)
PREFERRED_THREADS = 256


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
    registers = threads.max_registers_per_thread
    if registers is not None and words > registers:
        raise LoweringError(f"{what} keep {words} 32-bit registers per thread in tiles, above "
                            f"max_registers_per_thread {registers}; use a smaller TM x TN")
    if tiles.stages not in (1, 2):
        raise LoweringError(f"{what}: stages must be 1 (plain loads) or 2 (double buffering)")
    if tiles.stages == 2 and threads.async_copy_bytes is None:
        raise LoweringError(f"{what} ask for stages=2, but the thread hierarchy declares no "
                            "asynchronous copies (async_copy_bytes); use stages=1")


def _pow2_at_least(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


def _fits(tiles: ContractionTiles, threads: Any, element_bytes: int) -> bool:
    try:
        check_tiles("default", tiles, threads, element_bytes, element_bytes)
    except LoweringError:
        return False
    return True


def default_tiles(extents: tuple[int, int, int, int], element_bytes: int,
                  threads: Any) -> ContractionTiles:
    """The default configuration for a contraction of ``(batch, M, N, K)`` with operands of
    ``element_bytes``, from the spec rather than one chip: a register tile as large as
    half the registers per thread allows (up to 8 x 8), about
    :data:`PREFERRED_THREADS` threads shrunk to the problem, a slice of 32 bytes of ``k``
    per row, double buffering where the chip copies asynchronously; halved until it fits."""
    _, m, n, k = extents
    registers = threads.max_registers_per_thread or 255
    side = 8
    while side > 1 and side * side * 2 > registers:
        side //= 2
    thread_m, thread_n = min(side, _pow2_at_least(m)), min(side, _pow2_at_least(n))
    wanted = min(PREFERRED_THREADS, threads.max_threads_per_block)
    threads_m = min(_pow2_at_least(-(-m // thread_m)), 16)
    threads_n = max(1, min(wanted // threads_m, _pow2_at_least(-(-n // thread_n))))
    block_k = min(32 // element_bytes, _pow2_at_least(k))
    stages = 2 if threads.async_copy_bytes is not None else 1
    tiles = ContractionTiles(threads_m * thread_m, threads_n * thread_n, block_k, thread_m,
                             thread_n, stages)
    while not _fits(tiles, threads, element_bytes):
        if tiles.threads > 1:
            shrink_n = tiles.threads_n >= tiles.threads_m
            tiles = ContractionTiles(
                tiles.block_m if shrink_n else tiles.block_m // 2,
                tiles.block_n // 2 if shrink_n else tiles.block_n,
                tiles.block_k, thread_m, thread_n, stages)
        elif tiles.thread_m * tiles.thread_n > 1:
            thread_m, thread_n = max(1, thread_m // 2), max(1, thread_n // 2)
            tiles = ContractionTiles(thread_m, thread_n, tiles.block_k, thread_m, thread_n,
                                     stages)
        elif tiles.block_k > 1:
            tiles = ContractionTiles(1, 1, tiles.block_k // 2, 1, 1, stages)
        else:
            raise LoweringError("the GPU contraction template fits no tile in the thread "
                                f"hierarchy's limits ({threads.max_threads_per_block} threads, "
                                f"{threads.max_shared_bytes_per_block} shared bytes)")
    return tiles


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
