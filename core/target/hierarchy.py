"""Typed descriptions of how a chip runs work in parallel, beyond cores and vector lanes.

Two shapes of parallelism exist among tilecraft's targets, and a spec may declare either or
both (an x86 spec declares neither: its cores and lanes are :class:`ComputeUnits`):

- a **thread hierarchy** (GPUs, OpenCL devices, an NPU's grid of AI cores): the hardware axes
  a Kernel IR ``BOUND`` loop may be bound to, each with its launch scope (``grid``: blocks or
  work-groups, ``block``: threads or work-items of one block), launch dimension and largest
  extent; the threads per block, the warp / wavefront / subgroup size, registers and the
  shared memory one block may use; the barrier scopes the chip can synchronise;
- a **spatial architecture** (NPUs, FPGAs): the fixed-shape compute arrays (a 16x16x16 Cube,
  a vector unit, a MAC array of PEs), the memory level each operand role of an array reads or
  writes, and, for reconfigurable fabric, the resource budget (DSP slices, BRAM and URAM
  blocks).

Kernel IR names are checked against these declarations by the verifier
(:func:`tilecraft.kernel_ir.verify.verify_kernel`): a bound loop's axis must be a declared
axis and its extent within the axis' limit, a barrier's scope a declared scope.

>>> threads = ThreadHierarchy(
...     axes=[{"name": "blockIdx.x", "scope": "grid", "dim": 0, "max_extent": 65535},
...           {"name": "threadIdx.x", "scope": "block", "dim": 0, "max_extent": 1024}],
...     max_threads_per_block=1024, subgroup_size=32, barrier_scopes=["block", "warp"])
>>> threads.axis("threadIdx.x").scope.value, threads.axis_names
('block', ('blockIdx.x', 'threadIdx.x'))
>>> try:
...     threads.axis("threadIdx.w")
... except TargetError as err:
...     print(err)
unknown hardware axis 'threadIdx.w'; the bindable axes are blockIdx.x, threadIdx.x
"""

from __future__ import annotations

import enum
import re

from pydantic import Field, field_validator, model_validator

from tilecraft.errors import TargetError
from tilecraft.target.specmodel import Lax, Seq, SpecModel, check_identifier, check_unique

__all__ = [
    "ArrayUnitKind", "BindableAxis", "CoreResidency", "FabricBudget", "LaunchScope",
    "SpatialArchitecture", "SpatialUnit", "ThreadHierarchy",
]

#: an axis name: an identifier, optionally with one dotted component (``threadIdx.x``)
_AXIS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?$")


class LaunchScope(str, enum.Enum):
    """Which launch extent an axis indexes: the grid of blocks (work-groups, AI cores) or the
    threads (work-items) of one block."""

    GRID = "grid"
    BLOCK = "block"


class BindableAxis(SpecModel):
    """One hardware axis a ``BOUND`` loop may be bound to."""

    name: str = Field(description="the name Kernel IR uses, e.g. blockIdx.x or local_id.0")
    scope: Lax[LaunchScope]
    dim: int = Field(ge=0, le=2, description="launch dimension: 0 is x, 1 is y, 2 is z")
    max_extent: int = Field(ge=1, description="largest extent a loop bound to it may have")

    @field_validator("name")
    @classmethod
    def _axis_name(cls, value: str) -> str:
        if not _AXIS_NAME.match(value):
            raise ValueError(f"axis name {value!r} must be an identifier with at most one "
                             "dotted part, e.g. threadIdx.x")
        return value


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


class CoreResidency(SpecModel):
    """What one core (an NVIDIA SM, an AMD compute unit) holds resident at once, for one
    architecture generation the target builds for: these limits decide how many blocks of a
    kernel run on a core together (its occupancy), from the registers per thread and the
    shared memory per block the compiled kernel uses.

    Registers are given to a warp (subgroup) in units of ``register_allocation_unit`` and split
    evenly over ``register_partitions`` (the SM sub-partitions); shared memory is given to a
    block in units of ``shared_allocation_unit``, plus ``shared_bytes_reserved_per_block`` the
    system keeps for each block.

    >>> sm80 = CoreResidency(architecture="sm_80", max_threads=2048, max_blocks=32,
    ...                      registers=65536, register_allocation_unit=256,
    ...                      shared_bytes=167936, shared_allocation_unit=128,
    ...                      shared_bytes_reserved_per_block=1024)
    >>> sm80.max_subgroups(32), sm80.allocated_shared_bytes(4000)
    (64, 5120)
    >>> sm80.allocated_registers_per_subgroup(37, 32)  # 1184 rounded up to 256s
    1280
    """

    architecture: str = Field(description=(
        "the architecture these limits are for, as the toolchain names it: sm_80, sm_90"))
    max_threads: int = Field(ge=1, description="resident threads of one core")
    max_blocks: int = Field(ge=1, description="resident blocks (work-groups) of one core")
    registers: int = Field(ge=1, description="32-bit registers of one core")
    register_allocation_unit: int = Field(default=1, ge=1, description=(
        "registers are given to a subgroup (warp) in multiples of this"))
    register_partitions: int = Field(default=1, ge=1, description=(
        "sub-partitions the register file is split over; a subgroup's registers live in one"))
    shared_bytes: int = Field(ge=0, description=(
        "shared (local) memory of one core that resident blocks share"))
    shared_allocation_unit: int = Field(default=1, ge=1, description=(
        "shared memory is given to a block in multiples of this many bytes"))
    shared_bytes_reserved_per_block: int = Field(default=0, ge=0, description=(
        "shared memory the system reserves for each resident block"))
    max_shared_bytes_per_block: int | None = Field(default=None, ge=0, description=(
        "the most shared memory one block may use on this architecture (with any opt-in)"))

    @field_validator("architecture")
    @classmethod
    def _architecture(cls, value: str) -> str:
        return check_identifier(value, "architecture")

    @model_validator(mode="after")
    def _consistent(self) -> CoreResidency:
        if self.registers % self.register_partitions:
            raise ValueError(f"architecture {self.architecture}: registers {self.registers} "
                             f"do not split evenly over {self.register_partitions} partitions")
        if self.shared_bytes_reserved_per_block > self.shared_bytes:
            raise ValueError(f"architecture {self.architecture}: "
                             f"shared_bytes_reserved_per_block "
                             f"{self.shared_bytes_reserved_per_block} exceeds shared_bytes "
                             f"{self.shared_bytes}")
        per_block = self.max_shared_bytes_per_block
        if per_block is not None and per_block > self.shared_bytes:
            raise ValueError(f"architecture {self.architecture}: max_shared_bytes_per_block "
                             f"{per_block} exceeds the core's shared_bytes {self.shared_bytes}")
        return self

    def max_subgroups(self, subgroup_size: int) -> int:
        """Resident subgroups (warps) of one core."""
        return self.max_threads // subgroup_size

    def allocated_registers_per_subgroup(self, registers_per_thread: int,
                                         subgroup_size: int) -> int:
        """Registers one subgroup takes, rounded up to the allocation unit."""
        return _round_up(registers_per_thread * subgroup_size, self.register_allocation_unit)

    def allocated_shared_bytes(self, bytes_per_block: int) -> int:
        """Shared memory one block takes: its own, the reserved part, rounded up."""
        return _round_up(bytes_per_block + self.shared_bytes_reserved_per_block,
                         self.shared_allocation_unit)


class ThreadHierarchy(SpecModel):
    """The launch hierarchy of a chip that runs many threads (module docstring)."""

    axes: Seq[BindableAxis] = Field(min_length=1)
    max_threads_per_block: int = Field(ge=1, description=(
        "threads (work-items) of one block (work-group) together, over all block axes"))
    subgroup_size: int = Field(ge=1, description=(
        "threads that execute in lockstep: warp (NVIDIA, 32), wavefront (AMD, 64), subgroup"))
    max_registers_per_thread: int | None = Field(default=None, ge=1, description=(
        "32-bit registers one thread may use"))
    registers_per_block: int | None = Field(default=None, ge=1, description=(
        "32-bit registers all threads of one block may use together"))
    shared_bytes_per_block: int | None = Field(default=None, ge=0, description=(
        "shared (local) memory one block may allocate statically"))
    shared_bytes_per_block_optin: int | None = Field(default=None, ge=0, description=(
        "shared memory one block may use with the opt-in dynamic allocation (None: no opt-in)"))
    shared_level: str | None = Field(default=None, description=(
        "the memory level that holds block-shared buffers"))
    async_copy_bytes: int | None = Field(default=None, ge=1, description=(
        "the largest asynchronous global-to-shared copy one thread may issue, in bytes "
        "(CUDA's cp.async: 16); None: the chip has no asynchronous copies, tiles are staged "
        "with plain loads and barriers"))
    barrier_scopes: Seq[str] = Field(default=(), description=(
        "scopes a Kernel IR barrier may synchronise, e.g. block, warp"))
    residency: Seq[CoreResidency] = Field(default=(), description=(
        "per architecture the target builds for, what one core holds resident at once; "
        "the first is the spec's own chip"))

    @field_validator("barrier_scopes")
    @classmethod
    def _scopes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for scope in value:
            check_identifier(scope, "barrier scope")
        check_unique(value, "barrier scope")
        return value

    @field_validator("residency")
    @classmethod
    def _architectures(cls, value: tuple[CoreResidency, ...]) -> tuple[CoreResidency, ...]:
        check_unique([limits.architecture for limits in value], "architecture")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ThreadHierarchy:
        check_unique([axis.name for axis in self.axes], "axis")
        check_unique([f"{axis.scope.value} dim {axis.dim}" for axis in self.axes],
                     "launch dimension")
        for axis in self.axes:
            if axis.scope is LaunchScope.BLOCK and axis.max_extent > self.max_threads_per_block:
                raise ValueError(f"axis {axis.name}: max_extent {axis.max_extent} exceeds "
                                 f"max_threads_per_block {self.max_threads_per_block}")
        static, optin = self.shared_bytes_per_block, self.shared_bytes_per_block_optin
        if static is not None and optin is not None and optin < static:
            raise ValueError(f"shared_bytes_per_block_optin {optin} is below the static limit "
                             f"shared_bytes_per_block {static}; the opt-in maximum is the larger")
        return self

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(axis.name for axis in self.axes)

    def axis(self, name: str) -> BindableAxis:
        """The axis called ``name`` (a :class:`TargetError` listing the axes otherwise)."""
        for axis in self.axes:
            if axis.name == name:
                return axis
        raise TargetError(f"unknown hardware axis {name!r}; the bindable axes are "
                          f"{', '.join(self.axis_names)}")

    @property
    def architectures(self) -> tuple[str, ...]:
        """The architectures with residency limits, the spec's own chip first."""
        return tuple(limits.architecture for limits in self.residency)

    def residency_for(self, architecture: str) -> CoreResidency:
        """The residency limits of ``architecture`` (a :class:`TargetError` listing the known
        ones otherwise)."""
        for limits in self.residency:
            if limits.architecture == architecture:
                return limits
        known = ", ".join(self.architectures) or "none (the spec declares no residency)"
        raise TargetError(f"no residency limits for architecture {architecture!r}; the "
                          f"spec's architectures are {known}")

    @property
    def max_shared_bytes_per_block(self) -> int | None:
        """The most shared memory one block can get (the opt-in maximum where there is one)."""
        if self.shared_bytes_per_block_optin is not None:
            return self.shared_bytes_per_block_optin
        return self.shared_bytes_per_block


class ArrayUnitKind(str, enum.Enum):
    """What a spatial compute unit does per step: a matrix (cube, systolic or MAC array)
    multiply-accumulate, an elementwise vector operation, or scalar work."""

    MATRIX = "matrix"
    VECTOR = "vector"
    SCALAR = "scalar"


class SpatialUnit(SpecModel):
    """One kind of fixed-shape compute unit of a spatial architecture.

    ``pe_shape`` is the shape of the work one step does: ``[m, n, k]`` for a matrix unit (a
    16x16x16 Cube: the fractal shape), ``[rows, cols]`` for a 2-D PE array, ``[lanes]`` for a
    vector unit. ``operand_levels`` names the memory level each operand role is read from or
    written to (``input: L0A, weight: L0B, output: L0C``).
    """

    name: str
    kind: Lax[ArrayUnitKind]
    pe_shape: Seq[int] = Field(min_length=1)
    count_per_core: int = Field(default=1, ge=1)
    dtypes: Seq[str] = Field(default=(), description="input dtypes the unit computes on")
    operand_levels: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_identifier(value, "spatial unit name")

    @field_validator("pe_shape")
    @classmethod
    def _positive(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(extent < 1 for extent in value):
            raise ValueError(f"pe_shape {list(value)} has an extent below 1")
        return value

    @property
    def processing_elements(self) -> int:
        """Multiply-accumulates (or lanes) one step of the unit performs."""
        total = 1
        for extent in self.pe_shape:
            total *= extent
        return total


class FabricBudget(SpecModel):
    """The resources of a reconfigurable device (an FPGA part) a design must fit in."""

    part: str = Field(description="the vendor's part number, e.g. xcvu9p-flgb2104-2-i")
    dsp_slices: int = Field(ge=0)
    bram36_blocks: int = Field(ge=0, description="36 Kb block RAMs")
    uram_blocks: int = Field(default=0, ge=0, description="288 Kb UltraRAMs")
    luts: int | None = Field(default=None, ge=0)
    dsp_slices_used: int = Field(default=0, ge=0, description=(
        "slices the target's fixed compute array already takes"))

    @model_validator(mode="after")
    def _fits(self) -> FabricBudget:
        if self.dsp_slices_used > self.dsp_slices:
            raise ValueError(f"dsp_slices_used {self.dsp_slices_used} exceeds the part's "
                             f"{self.dsp_slices} DSP slices")
        return self


class SpatialArchitecture(SpecModel):
    """Fixed-shape compute units and, on an FPGA, the fabric budget (module docstring)."""

    units: Seq[SpatialUnit] = Field(min_length=1)
    fabric: FabricBudget | None = None
    barrier_scopes: Seq[str] = Field(default=(), description=(
        "scopes a Kernel IR barrier may synchronise, e.g. pipe (between an NPU's units)"))

    @model_validator(mode="after")
    def _unique(self) -> SpatialArchitecture:
        check_unique([unit.name for unit in self.units], "spatial unit")
        check_unique(self.barrier_scopes, "barrier scope")
        return self

    def unit(self, name: str) -> SpatialUnit:
        for unit in self.units:
            if unit.name == name:
                return unit
        raise TargetError(f"unknown spatial unit {name!r}; the units are "
                          f"{', '.join(u.name for u in self.units)}")
