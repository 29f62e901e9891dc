"""The CPU strategy: FlexTensor's CPU template (thesis §4.5, Fig. 4.4a) at its fixed decisions
(§4.3.2: "parallelise the outermost (fused) loop, vectorise the innermost") — the schedule
every compute of a CPU-like target gets when nothing else (a target's template, tuning) says
otherwise.

With the primitives, on the stage of one compute:

- ``reorder``: spatial axes outermost, in order; then the reduce axes; the innermost spatial
  axis (the output's contiguous one) innermost — unless the compute is a row reduction (no
  load the reduction moves walks memory along the innermost spatial axis, some do along the
  innermost reduce axis: softmax's max and sum, batch norm's gradients summed over
  ``(n, h, w)``), where every spatial axis stays outside — but not a short window sliding
  with the outputs (max pooling's 3 taps: the outputs fill the lanes, read with small
  strides). Axes of extent 1 get no loop (spatial ones go first, reduce ones last);
- ``fuse`` + ``parallel``: leading spatial axes fused until the loop has
  ``options.parallel_threshold`` iterations, run on the cores;
- ``vectorize``: the innermost loop, when it is the innermost spatial axis or the innermost
  reduce axis (a vector reduction), with the target's lanes for the output's dtype. Trailing
  axes every load reads as one contiguous run (or not at all) are first fused into it
  (``out[c, h, w] = x[c, h, w] + b[c]``: ``h_w``; a global pool's ``rh_rw``), leaving the
  parallel loop its iterations; a transposition (the loads striding along the vector axis
  are contiguous along another) runs in ``lanes``-wide tiles: ``t.outer > d > t.inner``;
- ``unroll``: the innermost non-vector reduce loop when its extent is within
  ``options.unroll_limit``.

Each step is taken only where the target offers its primitive and loop kind (without
``reorder`` the loops keep their order, without ``fuse`` one axis runs in parallel).
Half-precision reductions accumulate in a float32 buffer, as every lowering does.

>>> from tilecraft import te
>>> from tilecraft.lower import LoweringOptions
>>> from tilecraft.schedule import create_schedule
>>> A = te.placeholder((1, 32, 64), name="A")
>>> W = te.placeholder((64, 48), name="W")
>>> k = te.reduce_axis(64, name="k")
>>> C = te.compute((1, 32, 48), lambda b, i, j: te.sum(A[b, i, k] * W[k, j], axis=k), name="C")
>>> options = LoweringOptions(vector_lanes=16, cores=2)
>>> s = create_schedule(C, options)
>>> CpuStrategy().apply(s, C, options)
>>> s[C].describe()
'b: serial(1) > i: parallel(32) > k: serial(64) > j: vector(48, lanes=16)'
>>> [step["primitive"] for step in s.trace]
['reorder', 'parallel', 'vectorize']
"""

from __future__ import annotations

from typing import Any

from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.lower.options import LoweringOptions
from tilecraft.schedule.strategies.base import contiguous_loads, fuse_all
from tilecraft.target.spec import SchedulePrimitive
from tilecraft.te.bounds import affine
from tilecraft.te.expr import IterVar, Load, Select
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import loads_in, vars_in, walk

__all__ = ["CpuStrategy"]


def _streamed_contiguous(tensor: Tensor, axis: IterVar) -> int:
    """How many loads that change with the reduction step by one element along ``axis``. A
    load the reduction does not move (batch norm's ``mean[c]`` in a gradient summed over
    ``(n, h, w)``) is read once per output and does not make ``axis`` the vector one: lanes
    along ``c`` would gather the streamed operands ``h * w`` elements apart."""
    reduce = {axis for axis in tensor.reduce_axes if axis.extent > 1}
    streamed = [load for load in loads_in(tensor.body)
                if any(v in reduce for index in load.indices for v in vars_in(index))]
    forms = [affine(load.indices[-1]) for load in streamed if load.indices]
    return sum(1 for form in forms if form is not None and form.terms().get(axis) == 1)


#: the largest step along the innermost spatial axis with which a load still reads vectors of
#: nearby elements (a wide load and a shuffle) rather than scattered ones
SMALL_STRIDE = 4


def _short_window(tensor: Tensor, reduce_axis: IterVar, spatial_axis: IterVar,
                  lanes: int) -> bool:
    """Whether a reduction along memory is a short window sliding with the output — max
    pooling's ``x[.., h * 2 + rh, w * 2 + rw]`` over 3 taps: fewer taps than ``lanes``, more
    outputs along ``spatial_axis`` than taps, and every load stepping along ``spatial_axis``
    by at most :data:`SMALL_STRIDE` elements in its last index only. Vectors then run along
    the outputs (strided loads) instead of filling 3 of 16 lanes with taps."""
    if lanes <= 1 or reduce_axis.extent >= lanes or spatial_axis.extent <= reduce_axis.extent:
        return False
    for load in loads_in(tensor.body):
        if not load.indices:
            continue
        if any(spatial_axis in vars_in(index) for index in load.indices[:-1]):
            return False
        form = affine(load.indices[-1])
        if form is None or form.terms().get(spatial_axis, 0) > SMALL_STRIDE:
            return False
    return True


def _row_major_terms(load: Load) -> dict[IterVar, int] | None:
    """The coefficient of each axis in ``load``'s row-major element offset (None when an
    index is not affine)."""
    terms: dict[IterVar, int] = {}
    stride = 1
    for index, extent in zip(reversed(load.indices), reversed(load.tensor.shape)):
        form = affine(index)
        if form is None:
            return None
        for var, coef in form.terms().items():
            if isinstance(var, IterVar):
                terms[var] = terms.get(var, 0) + coef * stride
        stride *= extent
    return terms


def _flattened(tensor: Tensor, positions: list[int], keep: int) -> list[int]:
    """The trailing axes among ``positions`` (all spatial, or all reduce ones) that every load
    reads as one contiguous run, or not at all — ``out[c, h, w] = x[c, h, w] + bias[c]``
    gives ``(h, w)``, a global average pool's sum over ``(h, w)`` too: fused, they make one
    long vector loop instead of ``h`` short ones of ``w`` lanes. At least ``keep`` iterations
    of the other ``positions`` stay outside (the parallel loop's); fewer than two axes means
    no flattening."""
    loads = [_row_major_terms(load) for load in loads_in(tensor.body)]
    if any(terms is None for terms in loads):
        return []
    axes = (*tensor.axes, *tensor.reduce_axes)
    guarded = {var for node in walk(tensor.body) if isinstance(node, Select)
               for var in vars_in(node.cond)}  # a padded read's bounds guards
    outer = 1
    for p in positions:
        outer *= axes[p].extent
    chosen: list[int] = []
    for p in reversed(positions):
        group = [p, *chosen]
        inner = 1
        natural = {}
        for q in reversed(group):
            natural[axes[q]] = inner
            inner *= axes[q].extent
        if chosen and outer // inner < keep:
            break
        fits = all(all(terms.get(axes[q], 0) == 0 for q in group)
                   or all(terms.get(axes[q], 0) == natural[axes[q]] for q in group)
                   for terms in loads if terms is not None)
        if not fits or axes[p] in guarded:
            break
        chosen.insert(0, p)
    return chosen if len(chosen) > 1 else []


def _transposing_axis(tensor: Tensor, spatial: list[int], vector: int,
                      lanes: int) -> int | None:
    """The spatial axis (position) along which the loads that stride along the vector axis
    (by more than :data:`SMALL_STRIDE`) are contiguous — ``d`` in the head transpose
    ``out[h, d, t] = x[t, h * 64 + d]`` — when the compute is such a transposition with
    room for tiles (``lanes`` or more along that axis, twice the lanes along the vector
    one); else None. Walking the vector axis whole, such reads touch one row per lane and
    evict each other long before the next ``d`` comes back to them."""
    axes = tensor.axes
    if axes[vector].extent < 2 * lanes:
        return None
    found: set[int] = set()
    for load in loads_in(tensor.body):
        terms = _row_major_terms(load)
        if terms is None:
            return None
        if terms.get(axes[vector], 0) <= SMALL_STRIDE:
            continue
        contiguous = [p for p in spatial if p != vector and terms.get(axes[p], 0) == 1]
        if len(contiguous) != 1:
            return None
        found.add(contiguous[0])
    if len(found) != 1:
        return None
    (across,) = found
    return across if axes[across].extent >= lanes else None


class CpuStrategy:
    """Parallel outer loop, vector inner loop (module docstring)."""

    name = "cpu"

    def selects(self, options: LoweringOptions) -> bool:
        return True

    def apply(self, schedule: Any, tensor: Tensor, options: LoweringOptions) -> None:
        stage = schedule[tensor]
        target = schedule.target
        roots = stage.root_loops
        axes = (*tensor.axes, *tensor.reduce_axes)
        spatial = [p for p, axis in enumerate(tensor.axes) if axis.extent > 1]
        reduce = [len(tensor.axes) + p for p, axis in enumerate(tensor.reduce_axes)
                  if axis.extent > 1]
        last_spatial = len(tensor.axes) - 1
        reorder = target.offers(SchedulePrimitive.REORDER)
        inner_spatial = [last_spatial] if reorder and reduce and last_spatial in spatial else []
        if (inner_spatial and _streamed_contiguous(tensor, axes[last_spatial]) == 0
                and contiguous_loads(tensor, axes[reduce[-1]]) > 0
                and not _short_window(tensor, axes[reduce[-1]], axes[last_spatial],
                                      options.lanes(tensor.dtype))):
            inner_spatial = []  # a row reduction: the reduce axis is the vector one
        outer_spatial = [p for p in spatial if p not in inner_spatial]
        order = outer_spatial + reduce + inner_spatial

        vector = None
        lanes = options.lanes(tensor.dtype)
        if options.vectorize and options.allows(LoopKind.VECTOR) and lanes > 1 and order \
                and target.offers(SchedulePrimitive.VECTORIZE):
            if order[-1] == last_spatial or (reduce and order[-1] == reduce[-1]):
                vector = order[-1]
        flat: list[int] = []
        if vector is not None and target.offers(SchedulePrimitive.FUSE):
            if vector == last_spatial and not reduce:
                flat = _flattened(tensor, spatial, options.parallel_threshold if options.parallel
                                  and options.allows(LoopKind.PARALLEL) else 1)
            elif reduce and vector == reduce[-1]:
                flat = _flattened(tensor, reduce, 1)
        unrolled = None
        if options.unroll_limit and options.allows(LoopKind.UNROLLED) and \
                target.offers(SchedulePrimitive.UNROLL):
            candidates = [p for p in reduce if p != vector and p not in flat]
            if candidates and axes[candidates[-1]].extent <= options.unroll_limit:
                unrolled = candidates[-1]
        if vector == last_spatial and not reduce and len(flat) < 2 and reorder \
                and target.offers(SchedulePrimitive.SPLIT):
            across = _transposing_axis(tensor, spatial, last_spatial, lanes)
            if across is not None:
                self._transpose_tiles(stage, spatial, across, last_spatial, lanes, options,
                                      target)
                return
        parallel = self._parallel_axes([p for p in order if p not in flat[:-1]], outer_spatial,
                                       vector, axes, options, target, reorder)

        if reorder:  # axes of extent 1 (no loop) outside, reduce ones inside the nest
            unused = [p for p in range(len(roots)) if p not in order]
            wanted = [roots[p] for p in unused if not roots[p].is_reduce] + \
                [roots[p] for p in order] + [roots[p] for p in unused if roots[p].is_reduce]
            if len(wanted) > 1 and wanted != list(stage.leaf_loops):
                stage.reorder(*wanted)
        if parallel:
            loops = [roots[p] for p in parallel]
            fused = loops[0] if len(loops) == 1 else \
                stage.fuse(*loops, name="_".join(loop.name for loop in loops))
            stage.parallel(fused)
        if len(flat) > 1:  # contiguous trailing axes: one long vector loop
            stage.vectorize(fuse_all(stage, [roots[p] for p in flat]), lanes=lanes)
        elif vector is not None:
            stage.vectorize(roots[vector], lanes=lanes)
        if unrolled is not None:
            stage.unroll(roots[unrolled], factor=axes[unrolled].extent)

    @staticmethod
    def _transpose_tiles(stage: Any, spatial: list[int], across: int, vector: int, lanes: int,
                         options: LoweringOptions, target: Any) -> None:
        """A transposition in tiles (see :func:`_transposing_axis`): the vector axis split
        into ``lanes``-wide blocks whose outer loop runs outside the axis the reads are
        contiguous along: ``h > t.outer > d > t.inner (vector)`` for ``out[h, d, t] =
        x[t, h * 64 + d]``, so a block's ``lanes`` rows stay in L1 while ``d`` walks them."""
        roots = stage.root_loops
        unused = [roots[p] for p in range(len(roots)) if p not in spatial]
        others = [roots[p] for p in spatial if p not in (across, vector)]
        outer, inner = stage.split(roots[vector], factor=lanes)
        stage.reorder(*unused, *others, outer, roots[across], inner)
        if options.parallel and options.allows(LoopKind.PARALLEL) \
                and target.offers(SchedulePrimitive.PARALLEL):
            chosen, product = [], 1
            for loop in [*others, outer]:
                chosen.append(loop)
                product *= loop.extent
                if product >= options.parallel_threshold \
                        or not target.offers(SchedulePrimitive.FUSE):
                    break
            stage.parallel(fuse_all(stage, chosen))
        stage.vectorize(inner, lanes=lanes)

    @staticmethod
    def _parallel_axes(order: list[int], outer_spatial: list[int], vector: int | None,
                       axes: tuple[Any, ...], options: LoweringOptions, target: Any,
                       reorder: bool) -> list[int]:
        """The leading spatial axes fused into the parallel loop (module docstring); without
        ``reorder`` only axes next to each other fuse."""
        if not (options.parallel and options.allows(LoopKind.PARALLEL)
                and target.offers(SchedulePrimitive.PARALLEL)):
            return []
        fuse = target.offers(SchedulePrimitive.FUSE)
        chosen: list[int] = []
        product = 1
        for position in order:
            if position not in outer_spatial or position == vector:
                break
            if chosen and not reorder and position != chosen[-1] + 1:
                break
            chosen.append(position)
            product *= axes[position].extent
            if product >= options.parallel_threshold or not fuse:
                break
        return chosen
