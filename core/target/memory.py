"""Memory hierarchies: a flat list of levels from outer to inner (Timeloop / TileFlow style).

Sizes and bandwidths are per instance of a level; ``fan_out`` is how many instances of the next
inner level (or, for the innermost level, of the compute units) one instance feeds, so the
number of instances of a level is the product of the fan-outs above it.

>>> hierarchy = MemoryHierarchy(levels=[
...     MemoryLevel(name="DRAM", size_bytes=None, bandwidth_bytes_per_cycle=16, kind="dram"),
...     MemoryLevel(name="L1", size_bytes=48 * 1024, bandwidth_bytes_per_cycle=128, fan_out=2,
...                 kind="cache"),
...     MemoryLevel(name="registers", size_bytes=2048, bandwidth_bytes_per_cycle=512,
...                 kind="registers"),
... ])
>>> hierarchy.names, hierarchy.outermost.name, hierarchy.innermost.name
(('DRAM', 'L1', 'registers'), 'DRAM', 'registers')
>>> hierarchy.instances("registers")
2
"""

from __future__ import annotations

import enum

from pydantic import Field, field_validator, model_validator

from tilecraft.errors import TargetError
from tilecraft.target.specmodel import Lax, Seq, SpecModel, check_identifier, check_unique


class MemoryKind(str, enum.Enum):
    """How a level is managed: the compiler allocates buffers in scratchpads and registers;
    caches are filled by hardware (tiles are chosen to fit, never allocated there)."""

    DRAM = "dram"
    CACHE = "cache"
    SCRATCHPAD = "scratchpad"
    REGISTERS = "registers"


class MemoryLevel(SpecModel):
    """One level of the hierarchy, per instance."""

    name: str
    size_bytes: int | None = Field(ge=1, description="capacity; None means unbounded (DRAM)")
    bandwidth_bytes_per_cycle: float = Field(
        gt=0, description="bytes per cycle between this level and the next inner one")
    latency_cycles: float = Field(default=0, ge=0)
    fan_out: int = Field(default=1, ge=1, description=(
        "instances of the next inner level (or compute units, for the innermost level) that "
        "one instance of this level feeds"))
    line_bytes: int | None = Field(default=None, ge=1,
                                   description="transfer granule (cache line, burst)")
    associativity: int | None = Field(default=None, ge=1, description=(
        "ways of a set-associative cache (lines of one set); None when unknown or not a cache"))
    holds: Seq[str] = Field(default=(), description=(
        "operand roles the level may hold (e.g. input, weight, output); empty means any"))
    shared_by_cores: bool = False
    kind: Lax[MemoryKind] = MemoryKind.SCRATCHPAD
    access_energy_pj_per_byte: float = Field(default=0.0, ge=0)
    banks: int | None = Field(default=None, ge=1, description=(
        "independent banks of a banked scratchpad (a GPU's shared memory: 32), each serving one "
        "bank word per cycle; accesses of one subgroup to different words of one bank "
        "serialise. None when not banked or unknown"))
    bank_bytes: int | None = Field(default=None, ge=1, description=(
        "bytes of one bank word (4 on NVIDIA GPUs); set together with banks"))
    allow_larger_than_outer: bool = Field(default=False, description=(
        "set when this level is legitimately larger than the level outside it (e.g. a GPU's "
        "register file against its shared memory)"))

    @field_validator("name")
    @classmethod
    def _name_is_identifier(cls, value: str) -> str:
        return check_identifier(value, "memory level name")

    @field_validator("holds")
    @classmethod
    def _holds_unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        check_unique(value, "operand role")
        return value

    @model_validator(mode="after")
    def _banks_with_their_width(self) -> MemoryLevel:
        if (self.banks is None) != (self.bank_bytes is None):
            raise ValueError(f"memory level {self.name}: set banks and bank_bytes together "
                             f"(got banks={self.banks}, bank_bytes={self.bank_bytes})")
        return self

    @model_validator(mode="after")
    def _whole_sets(self) -> MemoryLevel:
        if self.associativity is not None and self.size_bytes is not None \
                and self.line_bytes is not None \
                and self.size_bytes % (self.associativity * self.line_bytes):
            raise ValueError(
                f"level {self.name}: size_bytes {self.size_bytes} is not a whole number of sets "
                f"of {self.associativity} ways x {self.line_bytes}-byte lines; fix the size, "
                "associativity or line_bytes")
        return self

    @property
    def sets(self) -> int | None:
        """Sets of a set-associative cache (``size / (ways * line)``); None when unknown.

        >>> MemoryLevel(name="L1", size_bytes=32768, bandwidth_bytes_per_cycle=128,
        ...             line_bytes=64, associativity=8).sets
        64
        """
        if self.associativity is None or self.size_bytes is None or self.line_bytes is None:
            return None
        return self.size_bytes // (self.associativity * self.line_bytes)

    def may_hold(self, role: str) -> bool:
        """Whether operands of ``role`` may be placed in this level."""
        return not self.holds or role in self.holds


class MemoryHierarchy(SpecModel):
    """Levels from outer (DRAM) to inner (registers)."""

    levels: Seq[MemoryLevel] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_levels(self) -> MemoryHierarchy:
        check_unique([level.name for level in self.levels], "memory level")
        outer_sized: MemoryLevel | None = None
        for position, level in enumerate(self.levels):
            if level.size_bytes is None:
                if outer_sized is not None:
                    raise ValueError(
                        f"levels[{position}] ({level.name}) is unbounded (size_bytes: null) but "
                        f"lies inside the bounded level {outer_sized.name}; only the outermost "
                        "levels may be unbounded")
                continue
            if outer_sized is not None and outer_sized.size_bytes is not None \
                    and level.size_bytes > outer_sized.size_bytes \
                    and not level.allow_larger_than_outer:
                raise ValueError(
                    f"levels[{position}] ({level.name}) has size_bytes {level.size_bytes}, "
                    f"larger than the outer level {outer_sized.name} ({outer_sized.size_bytes}); "
                    "levels are listed outer to inner: fix the order or the sizes, or set "
                    "allow_larger_than_outer: true on this level")
            outer_sized = level
        return self

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(level.name for level in self.levels)

    @property
    def outermost(self) -> MemoryLevel:
        return self.levels[0]

    @property
    def innermost(self) -> MemoryLevel:
        return self.levels[-1]

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def index(self, name: str) -> int:
        """Position of level ``name`` (0 is the outermost)."""
        try:
            return self.names.index(name)
        except ValueError:
            raise TargetError(f"unknown memory level {name!r}; the levels are "
                              f"{', '.join(self.names)}") from None

    def level(self, name: str) -> MemoryLevel:
        """The level called ``name`` (a :class:`TargetError` listing the levels otherwise)."""
        return self.levels[self.index(name)]

    def is_outer(self, outer: str, inner: str) -> bool:
        """Whether level ``outer`` lies outside level ``inner``."""
        return self.index(outer) < self.index(inner)

    def instances(self, name: str) -> int:
        """How many instances of level ``name`` exist (product of the fan-outs above it)."""
        count = 1
        for level in self.levels[:self.index(name)]:
            count *= level.fan_out
        return count
