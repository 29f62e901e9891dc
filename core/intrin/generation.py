"""Two-step mapping generation (thesis §5.4, Fig. 5.2 e-h).

**Step 1, virtual mapping.** A virtual accelerator loads operands of any size and computes in
one go: the software loops on each intrinsic loop are fused (outer to inner, the compute's loop
order) into one loop whose extent is the product of theirs, which turns the operation into an
equivalent problem of the intrinsic's shape (a convolution into a matrix multiplication).
Software loops on no intrinsic loop stay around it (``outer``).

**Step 2, physical constraints.** Each fused loop is split by the intrinsic's extent (its
problem size): ``tiles = ceil(extent / tile)``; the ragged edge is padded with zeros, never
refused (a 2x2x2 GEMM runs on a 16x16x16 intrinsic with most of each tile padding). Operands
are laid out tile by tile (§5.4's example: tile ``(T_i1, T_r1)`` of a 4x9 matrix cut into 2x2
tiles starts at ``(T_i1 * 5 + T_r1) * 4``), which fills in the memory abstraction's address
form ``base + sum(index_d * stride_d)`` for every move of every operand: the base is the tile's
start, the strides those of a compact tile in the order the move's fixed strides ask for
(row-major where the compiler sets them). Kernel IR regions of the lowered kernel
(:mod:`.lowering`) are logical views of the tiles, whatever their order in memory.

An operand dimension indexed by a constant (``Src1[0]`` of a broadcast FMA, the same scalar
for all 16 lanes) is one tile of the operand's extent there, with only the constant position
packed; the rest of the tile stays zero.

>>> from tilecraft import te, ops
>>> from tilecraft.intrin.examples import wmma
>>> from tilecraft.intrin.verify import force_mapping
>>> x = te.placeholder((1, 1, 6, 6), "float16", name="x")
>>> w = te.placeholder((4, 1, 3, 3), "float16", name="w")
>>> y = ops.conv2d(x, w, out_dtype="float32", name="y")
>>> mma = wmma(2, 2, 2)
>>> mapping = force_mapping(y, mma, {"i1": ["n", "h", "w"], "i2": ["k"],
...                                  "r1": ["rc", "rh", "rw"]})
>>> physical = generate(y, mma, mapping)
>>> print(physical.virtual)
Dst[i1, i2] += Src1[i1, r1] * Src2[r1, i2] with i1 = (((n * 16) + (h * 4)) + w) (16), \
i2 = k (4), r1 = (((rc * 9) + (rh * 3)) + rw) (9)
>>> src1 = physical.layout("Src1")
>>> src1.grid_shape, src1.tile_shape
((8, 5), (2, 2))
>>> print(physical.software_base("Src1"))
(((((((n * 16) + (h * 4)) + w) // 2) * 5) + ((((rc * 9) + (rh * 3)) + rw) // 2)) * 4)
>>> physical.intrinsic_calls, physical.padded_iterations, round(physical.utilisation, 3)
(80, 64, 0.9)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from tilecraft.dtypes import DType
from tilecraft.intrin.access import ProductSum, analyse_compute
from tilecraft.intrin.mapping import IntrinsicMapping, MappingError, Reason, ReasonKind
from tilecraft.target.intrinsic import IntrinsicDecl, OperandMove, OperandRole
from tilecraft.te.expr import AxisKind, Const, Expr, IterVar, Var
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import substitute


@dataclass(frozen=True)
class FusedLoop:
    """An intrinsic loop with the software loops fused onto it (outer to inner)."""

    name: str
    kind: AxisKind
    software: tuple[IterVar, ...]
    tile: int

    @property
    def extent(self) -> int:
        """The fused extent: the product of the software extents (1 when none)."""
        return math.prod(loop.extent for loop in self.software)

    @property
    def tiles(self) -> int:
        return -(-self.extent // self.tile)

    @property
    def padded_extent(self) -> int:
        return self.tiles * self.tile

    def strides(self) -> tuple[int, ...]:
        """Each software loop's weight in the fused index."""
        result, step = [], 1
        for loop in reversed(self.software):
            result.append(step)
            step *= loop.extent
        return tuple(reversed(result))

    def fused_index(self) -> Expr:
        """The fused index in the software loops (``n * 16 + h * 4 + w``)."""
        terms: list[Expr] = [loop * stride if stride != 1 else loop
                             for loop, stride in zip(self.software, self.strides())]
        if not terms:
            return Const(0, DType.INT32)
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        return total

    def split(self, index: Expr) -> dict[IterVar, Expr]:
        """Each software loop's value at fused position ``index`` (``0 <= index < extent``)."""
        values: dict[IterVar, Expr] = {}
        for position, (loop, stride) in enumerate(zip(self.software, self.strides())):
            value = index // stride if stride != 1 else index
            values[loop] = value % loop.extent if position else value
        return values

    def __str__(self) -> str:
        return f"{self.name} = {self.fused_index()} ({self.extent})"


#: a dimension of an intrinsic operand: the intrinsic loop indexing it, or the fixed position
#: (an integer literal, e.g. ``Src1[0]`` of a broadcast operand) every iteration reads
DimIndex = str | int


def operand_dim_loops(intrinsic: IntrinsicDecl) -> dict[str, tuple[DimIndex, ...]]:
    """The intrinsic loop indexing each dimension of each operand, or the fixed position of a
    dimension indexed by an integer literal (a broadcast operand such as ``Src1[0]``, the same
    value for every iteration of the loops that do not index it); generation needs each loop
    at most once per operand and no other index expressions.

    >>> from tilecraft.intrin.examples import wmma
    >>> operand_dim_loops(wmma(16, 16, 16))["Src2"]
    ('r1', 'i2')
    """
    loops = {loop.name for loop in intrinsic.compute.loops}
    result: dict[str, tuple[DimIndex, ...]] = {}
    for operand in intrinsic.compute.operands:
        dims: list[DimIndex] = []
        for index, extent in zip(operand.index, operand.shape):
            text = index.strip()
            if text.isdigit() and int(text) < extent:
                dims.append(int(text))
            elif text in loops:
                dims.append(text)
            else:
                dims.append("")  # refused below
        names = [d for d in dims if isinstance(d, str)]
        if "" in names or len(set(names)) != len(names):
            message = (f"operand {operand.name} of {intrinsic.name} is indexed "
                       f"[{', '.join(operand.index)}]; mapping generation needs each "
                       "dimension indexed by one intrinsic loop (each loop once) or by a "
                       "constant position inside the operand's shape")
            raise MappingError(message, [Reason(ReasonKind.UNSUPPORTED, message,
                                                operand=operand.name)])
        result[operand.name] = tuple(dims)
    return result


@dataclass(frozen=True)
class VirtualMapping:
    """Step 1: the compute as one intrinsic-shaped problem of fused extents."""

    intrinsic: IntrinsicDecl
    mapping: IntrinsicMapping
    product: ProductSum
    loops: tuple[FusedLoop, ...]
    outer: tuple[IterVar, ...]
    dims: Mapping[str, tuple[DimIndex, ...]]

    def loop(self, name: str) -> FusedLoop:
        return next(loop for loop in self.loops if loop.name == name)

    def shape(self, operand: str) -> tuple[int, ...]:
        """The virtual operand's shape (fused extents of its dimensions' loops; a dimension at
        a fixed position keeps the operand's own extent, one tile)."""
        declared = self.intrinsic.compute.operand(operand).shape
        return tuple(self.loop(name).extent if isinstance(name, str) else extent
                     for name, extent in zip(self.dims[operand], declared))

    def __str__(self) -> str:
        compute = self.intrinsic.compute
        dst = compute.destination
        sources = " * ".join(f"{op.name}[{', '.join(map(str, self.dims[op.name]))}]"
                             for op in compute.sources)
        text = (f"{dst.name}[{', '.join(map(str, self.dims[dst.name]))}] += {sources} with "
                f"{', '.join(str(loop) for loop in self.loops)}")
        if self.outer:
            text += f"; outer loops {', '.join(loop.name for loop in self.outer)}"
        return text


def virtual_mapping(compute: Tensor, intrinsic: IntrinsicDecl,
                    mapping: IntrinsicMapping) -> VirtualMapping:
    """Step 1 for a mapping (not verified here: :func:`generate` verifies)."""
    product = analyse_compute(compute)
    loops = tuple(FusedLoop(loop.name, loop.kind, mapping.software_loops(loop.name), loop.extent)
                  for loop in intrinsic.compute.loops)
    mapped = mapping.mapped
    outer = tuple(loop for loop in product.loops if loop not in mapped)
    return VirtualMapping(intrinsic, mapping, product, loops, outer,
                          operand_dim_loops(intrinsic))


@dataclass(frozen=True)
class MoveAddress:
    """One move of the memory abstraction with its address form filled in: the tile's
    ``base`` (over the tile index variables), the element ``strides`` within a tile, and the
    value of every parameter the declaration names (base and stride parameters)."""

    move: OperandMove
    base: Expr
    strides: tuple[int, ...]
    parameters: tuple[tuple[str, Expr | int], ...]


@dataclass(frozen=True)
class OperandLayout:
    """An operand's tiles: the virtual (fused) shape, cut into tiles of the intrinsic's shape,
    stored tile after tile in ``level`` (the outer side of its first move)."""

    operand: str
    role: OperandRole
    dtype: DType
    tensor: str
    dim_loops: tuple[DimIndex, ...]
    virtual_shape: tuple[int, ...]
    tile_shape: tuple[int, ...]
    level: str
    moves: tuple[MoveAddress, ...]

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(-(-v // t) for v, t in zip(self.virtual_shape, self.tile_shape))

    @property
    def padded_shape(self) -> tuple[int, ...]:
        return tuple(g * t for g, t in zip(self.grid_shape, self.tile_shape))

    @property
    def tile_elements(self) -> int:
        return math.prod(self.tile_shape)

    @property
    def tile_bytes(self) -> int:
        return self.tile_elements * self.dtype.bytes

    @property
    def buffer_shape(self) -> tuple[int, ...]:
        """Shape of the packed buffer: the tiles stacked along the first dimension, so that
        each tile is a :class:`~tilecraft.kernel_ir.nodes.Region` of the operand's rank."""
        return (math.prod(self.grid_shape) * self.tile_shape[0], *self.tile_shape[1:])

    @property
    def loop_dims(self) -> tuple[str, ...]:
        """The intrinsic loops indexing the operand (dimensions at a fixed position left out)."""
        return tuple(name for name in self.dim_loops if isinstance(name, str))

    def tile_number(self, tile_index: Mapping[str, Expr]) -> Expr:
        """The linear number of the tile at ``tile_index`` (per intrinsic loop); a dimension at
        a fixed position is a single tile."""
        number: Expr | None = None
        for name, grid in zip(self.dim_loops, self.grid_shape):
            if not isinstance(name, str):
                continue
            index = tile_index[name]
            number = index if number is None else number * grid + index
        return number if number is not None else Const(0, DType.INT32)

    def region_base(self, tile_index: Mapping[str, Expr]) -> tuple[Expr, ...]:
        first = self.tile_number(tile_index) * self.tile_shape[0]
        return (first, *(Const(0, DType.INT32) for _ in self.tile_shape[1:]))

    def position(self, virtual_index: Mapping[str, Expr]) -> tuple[Expr, ...]:
        """Where virtual element ``virtual_index`` (per intrinsic loop) lies in the buffer."""
        tiles = {name: virtual_index[name] // tile
                 for name, tile in zip(self.dim_loops, self.tile_shape) if isinstance(name, str)}
        local = [virtual_index[name] % tile if isinstance(name, str) else Const(name, DType.INT32)
                 for name, tile in zip(self.dim_loops, self.tile_shape)]
        return (self.tile_number(tiles) * self.tile_shape[0] + local[0], *local[1:])


def move_strides(declared: tuple[int | str, ...], tile_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides within one tile for a move declaring ``declared``: the dimensions with
    fixed strides innermost (smallest first), then those the compiler sets, row-major; the
    tile is compact in that order. Fixed strides must come out as declared.

    >>> move_strides(("stride_a", 1), (16, 8)), move_strides((1, "ldb"), (16, 8))
    ((8, 1), (1, 16))
    """
    fixed = sorted((stride, d) for d, stride in enumerate(declared) if isinstance(stride, int))
    named = [d for d in reversed(range(len(declared))) if isinstance(declared[d], str)]
    strides = [0] * len(declared)
    step = 1
    for d in [d for _, d in fixed] + named:
        strides[d] = step
        step *= tile_shape[d]
    return tuple(strides)


def _moves(intrinsic: IntrinsicDecl, operand: str, base: Expr,
           tile_shape: tuple[int, ...]) -> tuple[MoveAddress, ...]:
    result = []
    for move in intrinsic.memory.moves_of(operand):
        strides = move_strides(tuple(move.address.strides), tile_shape)
        parameters: list[tuple[str, Expr | int]] = [(move.address.base, base)]
        for dim, (declared, stride) in enumerate(zip(move.address.strides, strides)):
            if isinstance(declared, str):
                parameters.append((declared, stride))
            elif declared != stride:
                message = (f"operand {operand} of {intrinsic.name} moves {move.from_level} -> "
                           f"{move.to_level} with fixed stride {declared} in dimension {dim}, "
                           f"but a compact {list(tile_shape)} tile has stride {stride} there; "
                           "declare a stride parameter or the strides of a compact tile")
                raise MappingError(message, [Reason(ReasonKind.LAYOUT, message,
                                                    operand=operand)])
        result.append(MoveAddress(move, base, strides, tuple(parameters)))
    return tuple(result)


@dataclass(frozen=True)
class PhysicalMapping:
    """Step 2: tiles, padding and the memory mapping of every operand."""

    virtual: VirtualMapping
    layouts: tuple[OperandLayout, ...]
    tile_vars: tuple[tuple[str, Var], ...]

    def layout(self, operand: str) -> OperandLayout:
        return next(layout for layout in self.layouts if layout.operand == operand)

    @property
    def outer_iterations(self) -> int:
        return math.prod(loop.extent for loop in self.virtual.outer)

    @property
    def intrinsic_calls(self) -> int:
        return self.outer_iterations * math.prod(loop.tiles for loop in self.virtual.loops)

    @property
    def useful_iterations(self) -> int:
        """Iterations of the software loop nest (each one useful multiply-add)."""
        return self.outer_iterations * math.prod(loop.extent for loop in self.virtual.loops)

    @property
    def executed_iterations(self) -> int:
        """Iterations the intrinsic calls execute, padding included."""
        return self.outer_iterations * math.prod(loop.padded_extent
                                                 for loop in self.virtual.loops)

    @property
    def padded_iterations(self) -> int:
        return self.executed_iterations - self.useful_iterations

    @property
    def utilisation(self) -> float:
        return self.useful_iterations / self.executed_iterations

    def software_base(self, operand: str) -> Expr:
        """The tile base address of ``operand`` written in the software loops (Fig. 5.2 h):
        each tile index replaced by ``fused_index // tile``."""
        layout = self.layout(operand)
        tiles = {var: self.virtual.loop(name).fused_index() // self.virtual.loop(name).tile
                 for name, var in self.tile_vars}
        return substitute(layout.tile_number(dict(self.tile_vars)) * layout.tile_elements,
                          tiles)

    def summary(self) -> str:
        lines = [str(self.virtual.mapping), f"virtual: {self.virtual}"]
        for layout in self.layouts:
            lines.append(f"{layout.operand} ({layout.tensor}): virtual "
                         f"{list(layout.virtual_shape)} -> {list(layout.grid_shape)} tiles of "
                         f"{list(layout.tile_shape)} in {layout.level}, base "
                         f"{self.software_base(layout.operand)}")
        lines.append(f"{self.intrinsic_calls} intrinsic calls, utilisation "
                     f"{self.utilisation:.1%} ({self.padded_iterations} padded iterations)")
        return "\n".join(lines)


def physical_mapping(virtual: VirtualMapping) -> PhysicalMapping:
    """Step 2 for a virtual mapping."""
    intrinsic = virtual.intrinsic
    tile_vars = tuple((loop.name, Var(f"T_{loop.name}")) for loop in intrinsic.compute.loops)
    layouts = []
    for operand in intrinsic.compute.operands:
        dims = virtual.dims[operand.name]
        binding = virtual.mapping.binding(operand.name)
        moves = intrinsic.memory.moves_of(operand.name)
        first = moves[0]
        level = first.from_level if operand.role is OperandRole.SRC else first.to_level
        layout = OperandLayout(operand.name, operand.role, operand.dtype, binding.tensor, dims,
                               virtual.shape(operand.name), tuple(operand.shape), level, ())
        base = layout.tile_number(dict(tile_vars)) * layout.tile_elements
        layouts.append(replace(layout, moves=_moves(intrinsic, operand.name, base,
                                                    layout.tile_shape)))
    return PhysicalMapping(virtual, tuple(layouts), tile_vars)


def generate(compute: Tensor, intrinsic: IntrinsicDecl, mapping: IntrinsicMapping, *,
             check: bool = True) -> PhysicalMapping:
    """Both steps for ``mapping``, verified first (``check=False`` skips verification, for
    mappings that came out of :func:`~tilecraft.intrin.matching.match`); a rejected mapping
    raises :class:`MappingError` with the reasons."""
    if check:
        from tilecraft.intrin.verify import verify

        verify(compute, intrinsic, mapping).raise_if_rejected(mapping)
    return physical_mapping(virtual_mapping(compute, intrinsic, mapping))
