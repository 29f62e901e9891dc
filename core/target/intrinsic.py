"""Hardware intrinsics as AMOS's compute and memory abstractions (thesis §5.3).

The compute abstraction (Def. 3, Eq. 5.1) states the intrinsic's loops, its operands with
their index expressions, and its semantics as one statement in Einstein-like notation (see
:mod:`tilecraft.target.semantics`); ``to_te()`` turns it into a te program, the one reference
used for matching, verification and as the conformance oracle. The memory abstraction (Def. 4,
Eq. 5.3-5.4) states, per operand, the levels it moves between, the companion load/store
instruction, and the address form (base + strides over the operand's dimensions) the compiler
fills in; a fill (``fill_fragment``) may initialise an accumulating destination instead.

Declarations are checked when they are made: the semantics must be a valid te program whose
operand shapes agree with the loop extents, every operand must move between levels with one
stride per dimension, a destination's fixed strides must give each element its own place, and
only the accumulator of a ``+=`` intrinsic is filled. Loaded for a target (a spec, or a
declaration file through :func:`tilecraft.target.spec.load_intrinsics`), every level named
must be one of the target's.

The Tensor Core ``mma_sync`` 32x8x16 of Eq. 5.2, with its loads and store of Eq. 5.4:

>>> mma = IntrinsicDecl(
...     name="mma_32x8x16",
...     compute=ComputeAbstraction(
...         loops=[{"name": "i1", "extent": 32, "kind": "spatial"},
...                {"name": "i2", "extent": 8, "kind": "spatial"},
...                {"name": "r1", "extent": 16, "kind": "reduce"}],
...         operands=[
...             {"name": "Src1", "role": "src", "dtype": "float16", "shape": [32, 16],
...              "index": ["i1", "r1"]},
...             {"name": "Src2", "role": "src", "dtype": "float16", "shape": [16, 8],
...              "index": ["r1", "i2"]},
...             {"name": "Dst", "role": "dst", "dtype": "float32", "shape": [32, 8],
...              "index": ["i1", "i2"]}],
...         semantics="Dst[i1, i2] += cast(float32, Src1[i1, r1]) * cast(float32, Src2[r1, i2])"),
...     memory=MemoryAbstraction(moves=[
...         {"operand": "Src1", "from_level": "shared", "to_level": "fragment",
...          "instruction": "load_matrix_sync", "address": {"base": "addr_a",
...                                                         "strides": ["stride_a", 1]}},
...         {"operand": "Src2", "from_level": "shared", "to_level": "fragment",
...          "instruction": "load_matrix_sync", "address": {"base": "addr_b",
...                                                         "strides": ["stride_b", 1]}},
...         {"operand": "Dst", "from_level": "fragment", "to_level": "global",
...          "instruction": "store_matrix_sync", "address": {"base": "addr_c",
...                                                          "strides": ["stride_c", 1]}}],
...         fills=[{"operand": "Dst", "level": "fragment", "instruction": "fill_fragment",
...                 "value": 0.0}]),
...     latency_cycles=32, throughput_per_cycle=0.25)
>>> program = mma.compute.to_te()
>>> [t.name for t in program.inputs], program.output.name
(['Src1', 'Src2', 'Dst_in'], 'Dst')
>>> mma.compute.access_matrix()[2].astype(int).tolist()
[[1, 0, 1], [0, 1, 1], [1, 1, 0]]
>>> mma.compute.iterations
4096
"""

from __future__ import annotations

import ast
import enum
import functools

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from tilecraft.dtypes import DType
from tilecraft.errors import InputError, TargetError
from tilecraft.target.semantics import (
    RESERVED_NAMES,
    IntrinsicProgram,
    Loop,
    Operand,
    build_program,
)
from tilecraft.target.specmodel import Lax, Seq, SpecModel, check_identifier, check_unique
from tilecraft.te.expr import AxisKind


class OperandRole(str, enum.Enum):
    SRC = "src"
    DST = "dst"


def _check_name(value: str, what: str) -> str:
    check_identifier(value, what)
    if value in RESERVED_NAMES:
        raise ValueError(f"{what} {value!r} is reserved in the semantics notation (a function "
                         "or dtype name); rename it")
    return value


class IntrinsicLoop(SpecModel):
    """One loop of the intrinsic's iteration space (``0 <= name < extent``)."""

    name: str
    extent: int = Field(ge=1)
    kind: Lax[AxisKind]

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return _check_name(value, "loop name")


class IntrinsicOperand(SpecModel):
    """An operand: its role, element type, shape, and index expression (one per dimension)
    in the intrinsic's loops."""

    name: str
    role: Lax[OperandRole]
    dtype: Lax[DType]
    shape: Seq[int] = Field(min_length=1)
    index: Seq[str] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return _check_name(value, "operand name")

    @field_validator("dtype")
    @classmethod
    def _not_bool(cls, value: DType) -> DType:
        if value is DType.BOOL:
            raise ValueError("an operand cannot be bool; use uint8 or int8")
        return value

    @field_validator("shape")
    @classmethod
    def _positive_shape(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(extent < 1 for extent in value):
            raise ValueError(f"shape {list(value)} has an extent below 1")
        return value

    @model_validator(mode="after")
    def _index_per_dimension(self) -> IntrinsicOperand:
        if len(self.index) != len(self.shape):
            raise ValueError(f"operand {self.name} has {len(self.shape)} dimensions "
                             f"{list(self.shape)} but {len(self.index)} index expressions "
                             f"{list(self.index)}; give one per dimension")
        return self

    @property
    def ndim(self) -> int:
        return len(self.shape)


def _program(semantics: str, loops: tuple[IntrinsicLoop, ...],
             operands: tuple[IntrinsicOperand, ...]) -> IntrinsicProgram:
    return build_program(
        semantics,
        [Loop(loop.name, loop.extent, loop.kind) for loop in loops],
        [Operand(op.name, op.role.value, op.dtype, tuple(op.shape), tuple(op.index))
         for op in operands])


@functools.lru_cache(maxsize=512)
def _cached_program(abstraction: ComputeAbstraction) -> IntrinsicProgram:
    return abstraction.to_te()


class ComputeAbstraction(SpecModel):
    """Def. 3: loops, operands and the semantics statement of one intrinsic."""

    loops: Seq[IntrinsicLoop] = Field(min_length=1)
    operands: Seq[IntrinsicOperand] = Field(min_length=1)
    semantics: str = Field(description=(
        "one statement in Einstein-like notation, e.g. "
        "'Dst[i1, i2] += cast(int32, Src1[i1, r1]) * cast(int32, Src2[r1, i2])'"))

    @field_validator("loops")
    @classmethod
    def _unique_loops(cls, value: tuple[IntrinsicLoop, ...]) -> tuple[IntrinsicLoop, ...]:
        check_unique([loop.name for loop in value], "loop")
        return value

    @field_validator("operands")
    @classmethod
    def _unique_operands(cls, value: tuple[IntrinsicOperand, ...],
                         info: ValidationInfo) -> tuple[IntrinsicOperand, ...]:
        check_unique([operand.name for operand in value], "operand")
        loops = {loop.name for loop in info.data.get("loops", ())}
        clash = loops & {operand.name for operand in value}
        if clash:
            raise ValueError(f"{sorted(clash)[0]!r} names both a loop and an operand; rename one")
        return value

    @field_validator("semantics")
    @classmethod
    def _semantics_is_valid(cls, value: str, info: ValidationInfo) -> str:
        if "loops" in info.data and "operands" in info.data:  # else those fields are reported
            _program(value, info.data["loops"], info.data["operands"])
        return value

    def to_te(self) -> IntrinsicProgram:
        """The semantics as a te program (a fresh one on every call)."""
        return _program(self.semantics, self.loops, self.operands)

    def apply(self, *operands: np.ndarray) -> None:
        """Run the semantics on numpy arrays, one per operand in declaration order, with the
        reference interpreter; the destination is written in place (and read first when the
        semantics accumulates). This is the oracle of conformance and emulation.

        >>> dot = ComputeAbstraction(
        ...     loops=[{"name": "i", "extent": 2, "kind": "spatial"},
        ...            {"name": "r", "extent": 3, "kind": "reduce"}],
        ...     operands=[{"name": "A", "role": "src", "dtype": "float32", "shape": [2, 3],
        ...                "index": ["i", "r"]},
        ...               {"name": "C", "role": "dst", "dtype": "float32", "shape": [2],
        ...                "index": ["i"]}],
        ...     semantics="C[i] += A[i, r]")
        >>> C = np.array([10, 20], np.float32)
        >>> dot.apply(np.arange(6, dtype=np.float32).reshape(2, 3), C)
        >>> C
        array([13., 32.], dtype=float32)
        """
        from tilecraft.reference import run

        if len(operands) != len(self.operands):
            raise InputError(f"the semantics takes {len(self.operands)} operands "
                             f"({', '.join(op.name for op in self.operands)}), got "
                             f"{len(operands)}")
        program = _cached_program(self)
        arrays = dict(zip((op.name for op in self.operands), operands))
        destination = self.destination
        inputs = {tensor.name: arrays[tensor.name] for tensor in program.sources}
        if program.accumulator is not None:
            inputs[program.accumulator.name] = arrays[destination.name]
        result = run(program.output, inputs)
        arrays[destination.name][...] = result

    @property
    def sources(self) -> tuple[IntrinsicOperand, ...]:
        return tuple(op for op in self.operands if op.role is OperandRole.SRC)

    @property
    def destination(self) -> IntrinsicOperand:
        return next(op for op in self.operands if op.role is OperandRole.DST)

    @property
    def accumulates(self) -> bool:
        """Whether the semantics reads the destination's previous value (``+=``)."""
        return isinstance(ast.parse(self.semantics.strip()).body[0], ast.AugAssign)

    def operand(self, name: str) -> IntrinsicOperand:
        for operand in self.operands:
            if operand.name == name:
                return operand
        raise TargetError(f"unknown operand {name!r}; the operands are "
                          f"{', '.join(op.name for op in self.operands)}")

    def loop(self, name: str) -> IntrinsicLoop:
        for loop in self.loops:
            if loop.name == name:
                return loop
        raise TargetError(f"unknown loop {name!r}; the loops are "
                          f"{', '.join(loop.name for loop in self.loops)}")

    def access_matrix(self) -> tuple[tuple[str, ...], tuple[str, ...], np.ndarray]:
        """The boolean access matrix of Algorithm 4: rows are operands, columns loops; an
        entry is true when the loop appears in the operand's index expressions."""
        loop_names = tuple(loop.name for loop in self.loops)
        operand_names = tuple(op.name for op in self.operands)
        matrix = np.zeros((len(operand_names), len(loop_names)), dtype=bool)
        for row, operand in enumerate(self.operands):
            for index in operand.index:
                for node in ast.walk(ast.parse(index.strip(), mode="eval")):
                    if isinstance(node, ast.Name) and node.id in loop_names:
                        matrix[row, loop_names.index(node.id)] = True
        return operand_names, loop_names, matrix

    @property
    def iterations(self) -> int:
        """Points of the iteration space (product of the loop extents)."""
        total = 1
        for loop in self.loops:
            total *= loop.extent
        return total


#: the key of a validation context (``model_validate(data, context=...)``) listing the memory
#: levels an intrinsic may name, so that a declaration file is checked against its target
LEVELS_CONTEXT = "memory_levels"
TARGET_CONTEXT = "target"


def check_known_level(value: str, info: ValidationInfo) -> str:
    """``value`` if the validation context names no levels or names it; else a ValueError
    listing the levels (how a declaration file is checked against its target's hierarchy)."""
    levels = (info.context or {}).get(LEVELS_CONTEXT)
    if levels is not None and value not in levels:
        target = (info.context or {}).get(TARGET_CONTEXT)
        owner = f"target {target}" if target else "the target"
        raise ValueError(f"{value!r} is not a memory level of {owner}; the levels are "
                         f"{', '.join(levels)}")
    return value


class AddressForm(SpecModel):
    """Where an operand lies in memory: ``base + sum(index_d * strides[d])`` (Eq. 5.4).

    A stride is an int (fixed, in elements: 1 means the dimension must be contiguous) or the
    name of a parameter the compiler sets (``stride_a``)."""

    base: str = "addr"
    strides: Seq[int | str] = Field(min_length=1)
    alignment_bytes: int = Field(default=1, ge=1)

    @field_validator("base")
    @classmethod
    def _base_name(cls, value: str) -> str:
        return check_identifier(value, "address base")

    @field_validator("strides")
    @classmethod
    def _stride_values(cls, value: tuple[int | str, ...]) -> tuple[int | str, ...]:
        for stride in value:
            if isinstance(stride, str):
                check_identifier(stride, "stride parameter")
            elif stride < 0:
                raise ValueError(f"stride {stride} is negative; strides are element counts")
        return value

    @field_validator("alignment_bytes")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError(f"alignment_bytes {value} is not a power of two")
        return value

    @property
    def fixed_strides(self) -> tuple[int, ...] | None:
        """The strides when every one is a number (None when the compiler sets some)."""
        if any(isinstance(stride, str) for stride in self.strides):
            return None
        return tuple(int(stride) for stride in self.strides)


class OperandMove(SpecModel):
    """One statement of Eq. 5.3: ``to_level.operand[...] = from_level.operand[address]``.

    ``address`` describes the operand in the outer of the two levels (the side the compiler
    lays out); the inner side is indexed by the operand's own index in the intrinsic loops."""

    operand: str
    from_level: str
    to_level: str
    instruction: str | None = Field(default=None, description=(
        "companion load/store instruction (e.g. load_matrix_sync); null for a plain access"))
    address: AddressForm

    @field_validator("from_level", "to_level")
    @classmethod
    def _known_level(cls, value: str, info: ValidationInfo) -> str:
        return check_known_level(value, info)

    @model_validator(mode="after")
    def _distinct_levels(self) -> OperandMove:
        if self.from_level == self.to_level:
            raise ValueError(f"operand {self.operand} moves from {self.from_level} to itself; "
                             "from_level and to_level must differ")
        return self


class OperandFill(SpecModel):
    """A statement ``level.operand[...] = value``: the destination's accumulator initialised
    in ``level`` by a companion instruction (``fill_fragment``), instead of being loaded."""

    operand: str
    level: str
    instruction: str | None = Field(default=None, description=(
        "companion fill instruction (e.g. fill_fragment); null for plain register writes"))
    value: float | None = Field(default=None, description=(
        "the constant it fills with; null means a value the compiler sets (e.g. 0 or a bias)"))

    @field_validator("level")
    @classmethod
    def _known_level(cls, value: str, info: ValidationInfo) -> str:
        return check_known_level(value, info)


class MemoryAbstraction(SpecModel):
    """Def. 4: the moves of every operand between memory levels, and the fills that may
    initialise an accumulating destination instead of a load."""

    moves: Seq[OperandMove] = Field(min_length=1)
    fills: Seq[OperandFill] = ()

    def moves_of(self, operand: str) -> tuple[OperandMove, ...]:
        return tuple(move for move in self.moves if move.operand == operand)

    def fills_of(self, operand: str) -> tuple[OperandFill, ...]:
        return tuple(fill for fill in self.fills if fill.operand == operand)

    @property
    def levels(self) -> tuple[str, ...]:
        """Every level named by a move or a fill, in first-use order."""
        seen: dict[str, None] = {}
        for move in self.moves:
            seen.setdefault(move.from_level)
            seen.setdefault(move.to_level)
        for fill in self.fills:
            seen.setdefault(fill.level)
        return tuple(seen)


class IntrinsicDecl(SpecModel):
    """A hardware intrinsic: compute and memory abstraction plus its cost figures."""

    name: str
    description: str = ""
    compute: ComputeAbstraction
    memory: MemoryAbstraction
    latency_cycles: float = Field(ge=0, description="cycles from issue to result")
    throughput_per_cycle: float = Field(gt=0, description="issues per cycle per core")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_identifier(value, "intrinsic name")

    @field_validator("memory")
    @classmethod
    def _memory_matches_operands(cls, memory: MemoryAbstraction,
                                 info: ValidationInfo) -> MemoryAbstraction:
        compute = info.data.get("compute")
        if compute is None:
            return memory  # the compute abstraction's own error is reported
        names = [op.name for op in compute.operands]
        for position, move in enumerate(memory.moves):
            if move.operand not in names:
                raise ValueError(f"moves[{position}] names operand {move.operand!r}, which the "
                                 f"compute abstraction does not declare ({', '.join(names)})")
            ndim = compute.operand(move.operand).ndim
            if len(move.address.strides) != ndim:
                raise ValueError(f"moves[{position}]: operand {move.operand} has {ndim} "
                                 f"dimensions but its address has "
                                 f"{len(move.address.strides)} strides; give one per dimension")
        missing = [name for name in names if not memory.moves_of(name)]
        if missing:
            raise ValueError(f"operand {missing[0]} has no memory move; state which levels it "
                             "moves between")
        _check_destination_addresses(compute, memory)
        _check_fills(compute, memory)
        return memory

    def reference(self, *operands: np.ndarray, **attrs: object) -> None:
        """The intrinsic's semantics on numpy operand views, in place (``attrs`` of the
        Kernel IR call are ignored): the form the Kernel IR interpreter calls."""
        self.compute.apply(*operands)


class IntrinsicSet(SpecModel):
    """A file of intrinsic declarations (one family, e.g. WMMA), which a plugin adds to its
    target spec with :func:`tilecraft.target.spec.load_intrinsics`."""

    description: str = ""
    intrinsics: Seq[IntrinsicDecl] = Field(min_length=1)

    @field_validator("intrinsics")
    @classmethod
    def _unique_names(cls, value: tuple[IntrinsicDecl, ...]) -> tuple[IntrinsicDecl, ...]:
        check_unique([intrinsic.name for intrinsic in value], "intrinsic")
        return value


def _check_destination_addresses(compute: ComputeAbstraction, memory: MemoryAbstraction) -> None:
    """A destination needs one place per element: fixed strides that send two of its elements
    to the same offset disagree with its shape (sources may overlap: a stride 0 broadcasts)."""
    destination = compute.destination
    size = int(np.prod(destination.shape))
    if size > 1 << 20:
        return  # too large to enumerate; such intrinsics do not exist
    for position, move in enumerate(memory.moves):
        strides = move.address.fixed_strides
        if move.operand != destination.name or strides is None:
            continue
        grid = np.indices(destination.shape).reshape(destination.ndim, -1)
        offsets = np.asarray(strides, dtype=np.int64) @ grid
        unique, first, counts = np.unique(offsets, return_index=True, return_counts=True)
        if len(unique) == size:
            continue
        clash = int(np.argmax(counts > 1))
        second = np.flatnonzero(offsets == unique[clash])[1]
        raise ValueError(
            f"moves[{position}]: the address strides {list(strides)} of the destination "
            f"{destination.name} (shape {list(destination.shape)}) put elements "
            f"{grid[:, first[clash]].tolist()} and {grid[:, second].tolist()} at the same "
            f"offset {int(unique[clash])}; a destination needs one place per element: fix the "
            "strides or the shape")


def _check_fills(compute: ComputeAbstraction, memory: MemoryAbstraction) -> None:
    """A fill initialises the accumulator of a '+=' intrinsic, in a level it is stored from."""
    destination = compute.destination
    names = [op.name for op in compute.operands]
    for position, fill in enumerate(memory.fills):
        if fill.operand not in names:
            raise ValueError(f"fills[{position}] names operand {fill.operand!r}, which the "
                             f"compute abstraction does not declare ({', '.join(names)})")
        if fill.operand != destination.name:
            raise ValueError(f"fills[{position}] fills {fill.operand}, a source; only the "
                             f"destination {destination.name} is filled (its accumulator)")
        if not compute.accumulates:
            raise ValueError(f"fills[{position}] initialises {fill.operand}, but the semantics "
                             "does not accumulate ('=' overwrites it); drop the fill or write "
                             f"'{destination.name}[...] += ...'")
        stored_from = [move.from_level for move in memory.moves_of(destination.name)]
        if fill.level not in stored_from:
            raise ValueError(f"fills[{position}] fills {fill.operand} in {fill.level}, but "
                             f"{fill.operand} moves out of {', '.join(stored_from)}; fill the "
                             "level the intrinsic accumulates in")
