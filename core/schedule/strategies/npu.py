"""The NPU strategy: tiles of the output computed in the memory levels of a spatial unit, for a
target whose spec declares units with the levels of their operands (an Ascend-like AI core:
a matrix unit reading L0A / L0B into L0C, a vector unit working in a unified buffer).

Which unit computes a compute: the matrix unit for a contraction (a sum of products of two
tensors) of a dtype it takes, else the vector unit (the first unit of another kind with
operand levels). Then, with the schedule primitives:

- the output is cut into tiles — the unit's ``m x n`` for a matrix unit, a vector of its lanes
  along the last axis for a vector unit — and the tiles run over the grid of cores (bound to
  the grid axis when the spec has one);
- each tile is computed into a buffer in the unit's output level (``cache_write``, computed
  at the tile loop) and copied out to the kernel's output;
- the inputs are copied into the unit's operand levels (``cache_read``): per chunk of the
  reduction (the matrix unit's ``k``, the vector unit's lanes) for a reduction, per tile
  otherwise — each an allocation in that level filled by copy loops.

>>> from tilecraft import te
>>> from tilecraft.lower import LoweringOptions
>>> from tilecraft.schedule import create_schedule
>>> from tilecraft.target.spec import load_spec
>>> spec = load_spec({"name": "toy", "api_version": 1, "version": "0",
...     "memory": {"levels": [
...         {"name": "GM", "size_bytes": None, "bandwidth_bytes_per_cycle": 64, "kind": "dram"},
...         {"name": "UB", "size_bytes": 65536, "bandwidth_bytes_per_cycle": 256}]},
...     "compute": {"cores": 4, "frequency_hz": 1e9, "vector_bits": 0},
...     "primitives": ["split", "fuse", "reorder", "compute_at", "cache"],
...     "loop_kinds": ["serial"], "evaluation": "estimate",
...     "capabilities": {"models_performance": True},
...     "spatial": {"units": [{"name": "vector", "kind": "vector", "pe_shape": [8],
...                            "operand_levels": {"input": "UB", "output": "UB"}}]}})
>>> A = te.placeholder((2, 12), name="A")
>>> B = te.compute((2, 12), lambda i, j: A[i, j] + 1.0, name="B")
>>> options = LoweringOptions.from_spec(spec)
>>> s = create_schedule(B, options)
>>> NpuStrategy().apply(s, B, options)
>>> print(s.lower(options)[0])
kernel B(A: float32[2, 12], B: float32[2, 12]) -> (B):
  for i_j_outer in serial(4):
    alloc B_UB: float32[1, 8] in UB
    alloc A_UB: float32[1, 8] in UB
    for i1 in serial(8):
      if ((((i_j_outer % 2) * 8) + i1) < 12):
        A_UB[0, i1] = A[(i_j_outer // 2), (((i_j_outer % 2) * 8) + i1)]
    for j in serial(8):
      if ((((i_j_outer % 2) * 8) + j) < 12):
        B_UB[0, j] = A_UB[0, j] + 1.0
    for j_inner in serial(8):
      if ((((i_j_outer % 2) * 8) + j_inner) < 12):
        B[i_j_outer // 2, ((i_j_outer % 2) * 8) + j_inner] = B_UB[0, j_inner]
"""

from __future__ import annotations

from typing import Any

from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.lower.options import LoweringOptions
from tilecraft.schedule.loop import Loop
from tilecraft.schedule.stage import Stage
from tilecraft.schedule.strategies.base import bind_to_grid, fuse_all, grid_axes
from tilecraft.target.hierarchy import ArrayUnitKind, SpatialUnit
from tilecraft.target.spec import SchedulePrimitive
from tilecraft.te.expr import Binary, BinaryOp, Cast, Expr, Load, Reduce, ReduceOp
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import loads_in, walk

__all__ = ["NpuStrategy", "operand_unit"]


class NpuStrategy:
    """Output tiles in a unit's memory levels (module docstring)."""

    name = "npu"

    def selects(self, options: LoweringOptions) -> bool:
        spatial = getattr(options.spec, "spatial", None)
        return spatial is not None and any(unit.operand_levels for unit in spatial.units)

    def apply(self, schedule: Any, tensor: Tensor, options: LoweringOptions) -> None:
        unit = operand_unit(tensor, options.spec.spatial.units)
        levels = unit.operand_levels
        out_level = levels.get("output") or levels.get("input") or options.param_level
        stage = schedule[tensor]
        local_tensor = schedule.cache_write(tensor, out_level)
        local = schedule[local_tensor]
        tile = self._tile_output(stage, unit, options, schedule)
        if tile is not None:
            local.compute_at(stage, tile)
        chunk = self._chunk_reduction(local, unit) if local.is_reduction else None
        for position, source in enumerate(schedule.reads_of(local)):
            role = "weight" if unit.kind is ArrayUnitKind.MATRIX and position == 1 else "input"
            level = levels.get(role) or levels.get("input") or out_level
            cached = schedule.cache_read(source, level, readers=[local])
            if chunk is not None:
                schedule[cached].compute_at(local, chunk)
        if not local.is_reduction and schedule.target.offers(SchedulePrimitive.VECTORIZE) \
                and schedule.target.allows_kind(LoopKind.VECTOR) and local.leaf_loops:
            local.vectorize(local.leaf_loops[-1])

    @staticmethod
    def _tile_output(stage: Stage, unit: SpatialUnit, options: LoweringOptions,
                     schedule: Any) -> Loop | None:
        """Split the output's last two axes by the unit's tile, fuse the tile loops outside
        the rest; returns the fused tile loop (None without spatial axes)."""
        axes = list(stage.axes)
        if not axes:
            return None
        shape = unit.pe_shape
        if unit.kind is ArrayUnitKind.MATRIX and len(shape) >= 2:
            tile = (shape[0], shape[1])
        else:
            tile = (1, shape[0])
        outer: list[Loop] = list(axes[:-2])
        inner: list[Loop] = []
        for axis, extent in zip(axes[-2:], tile[-len(axes[-2:]):]):
            if extent > 1:
                tiles, within = stage.split(axis, factor=min(extent, axis.extent),
                                            names=(f"{axis.name}_outer", f"{axis.name}_inner"))
                outer.append(tiles)
                inner.append(within)
            else:
                outer.append(axis)
        if len(outer) + len(inner) > 1:
            stage.reorder(*outer, *inner)
        tile_loop = fuse_all(stage, outer)
        threads = options.threads
        if threads is not None and grid_axes(threads) and \
                schedule.target.offers(SchedulePrimitive.BIND):
            bind_to_grid(stage, tile_loop, threads)
        return tile_loop

    @staticmethod
    def _chunk_reduction(local: Stage, unit: SpatialUnit) -> Loop:
        """Split the first reduce loop into chunks of the unit's reduction depth (a matrix
        unit's ``k``, a vector unit's lanes), chunks outermost: the inputs are copied in per
        chunk."""
        shape = unit.pe_shape
        depth = shape[2] if unit.kind is ArrayUnitKind.MATRIX and len(shape) >= 3 else shape[0]
        first = local.reduce_axes[0]
        chunks, within = local.split(first, factor=min(depth, first.extent),
                                     names=(f"{first.name}_outer", f"{first.name}_inner"))
        rest = [loop for loop in local.leaf_loops if loop is not chunks]
        local.reorder(chunks, *rest)
        return chunks


def operand_unit(tensor: Tensor, units: tuple[SpatialUnit, ...]) -> SpatialUnit:
    """The unit computing ``tensor``: a matrix unit for a contraction of dtypes it takes, else
    the first other unit with operand levels (else the first unit with any)."""
    with_levels = [unit for unit in units if unit.operand_levels]
    if _is_contraction(tensor):
        dtypes = {t.dtype.value for t in tensor.inputs}
        for unit in with_levels:
            if unit.kind is ArrayUnitKind.MATRIX and dtypes <= set(unit.dtypes):
                return unit
    others = [unit for unit in with_levels if unit.kind is not ArrayUnitKind.MATRIX]
    return (others or with_levels)[0]


def _is_contraction(tensor: Tensor) -> bool:
    """A sum over products of two different tensors (casts and guards allowed)."""
    body = tensor.body
    if not isinstance(body, Reduce) or body.op is not ReduceOp.SUM:
        return False
    tensors = {id(load.tensor) for load in loads_in(body.body)}
    return len(tensors) == 2 and any(_is_product(node) for node in walk(body.body))


def _is_product(node: Expr) -> bool:
    if not isinstance(node, Binary) or node.op is not BinaryOp.MUL:
        return False
    sides = [node.a, node.b]
    while any(isinstance(side, Cast) for side in sides):
        sides = [side.x if isinstance(side, Cast) else side for side in sides]
    return all(any(isinstance(n, Load) for n in walk(side)) for side in sides)
