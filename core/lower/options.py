"""What lowering needs to know about the target, as one frozen, hashable dataclass.

Build it directly (tests, tools) or from a target spec with :meth:`LoweringOptions.from_spec`,
which reads only these fields of the spec: ``memory.levels`` (outer to inner, each with
``name`` and ``size_bytes``), ``compute.cores``, ``compute.lanes(dtype)``, ``primitives``,
``loop_kinds`` and ``threads`` (the thread hierarchy of a GPU-like target, if it declares one).

>>> options = LoweringOptions(vector_lanes={"float32": 16, "int8": 64}, cores=2)
>>> options.lanes("float32"), options.lanes("int8"), options.lanes("float16")
(16, 64, 1)
>>> LoweringOptions(vector_lanes=8).lanes("int32")
8
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tilecraft.dtypes import DType, as_dtype
from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.nodes import LoopKind

LanesSpec = int | Callable[[DType], int] | Mapping[Any, int] | tuple[tuple[DType, int], ...]


@dataclass(frozen=True)
class LoweringOptions:
    """Target facts and switches for lowering.

    - ``param_level``: the memory level of kernel parameters (the spec's outermost level);
    - ``register_level``: where small local buffers (float32 accumulators of half-precision
      reductions) go, or ``None`` to put them in ``param_level``; ``register_bytes`` is its
      capacity (``None``: unlimited) — a buffer that does not fit goes to ``param_level``;
    - ``vector_lanes``: lanes of a vector loop per element type — an int for every type, a
      mapping from dtype (or its name) to lanes (missing types get 1), or a callable; the
      default, 1, assumes no SIMD unit (``from_spec`` reads the spec's vector width);
    - ``parallel`` / ``cores``: whether to make the outermost loop PARALLEL, over how many
      cores; leading spatial axes are fused until the parallel loop has at least
      ``min_parallel_extent`` iterations (default ``4 * cores``);
    - ``vectorize``: whether to make the innermost loop VECTOR;
    - ``unroll_limit``: unroll (UNROLLED) the innermost non-vector reduce loop when its extent
      is at most this (0: never);
    - ``loop_kinds``: the loop kinds the target offers (``None``: all);
    - ``threads``: the target's :class:`~tilecraft.target.hierarchy.ThreadHierarchy` (bindable
      axes with their limits, subgroup size, per-block registers and shared memory), ``None``
      for a target that launches no threads; ``bindable_axes`` and ``subgroup_size`` read it;
    - ``spec``: the target spec these options came from, used to verify the kernels.
    """

    param_level: str = "global"
    register_level: str | None = None
    register_bytes: int | None = None
    vector_lanes: LanesSpec = 1
    parallel: bool = True
    cores: int = 1
    vectorize: bool = True
    unroll_limit: int = 0
    min_parallel_extent: int | None = None
    loop_kinds: frozenset[LoopKind] | None = None
    threads: Any = None
    spec: Any = field(default=None, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        lanes = self.vector_lanes
        if isinstance(lanes, Mapping):
            pairs = tuple(sorted(((as_dtype(k), int(v)) for k, v in lanes.items()),
                                 key=lambda pair: pair[0].value))
            object.__setattr__(self, "vector_lanes", pairs)
        if self.loop_kinds is not None:
            kinds = frozenset(LoopKind(getattr(k, "value", k)) for k in self.loop_kinds)
            object.__setattr__(self, "loop_kinds", kinds)
        if self.cores < 1:
            raise LoweringError(f"LoweringOptions: cores={self.cores} must be at least 1")
        if self.unroll_limit < 0:
            raise LoweringError(f"LoweringOptions: unroll_limit={self.unroll_limit} must be >= 0")

    def lanes(self, dtype: DType | str) -> int:
        """Vector lanes for elements of ``dtype`` (at least 1)."""
        dt = as_dtype(dtype)
        spec = self.vector_lanes
        if isinstance(spec, int):
            value = spec
        elif isinstance(spec, tuple):
            value = dict(spec).get(dt, 1)
        else:
            value = spec(dt)
        return max(1, int(value))

    def allows(self, kind: LoopKind) -> bool:
        """Whether the target offers loops of ``kind``."""
        return self.loop_kinds is None or kind in self.loop_kinds

    @property
    def bindable_axes(self) -> tuple[str, ...]:
        """Hardware axes a BOUND loop may be bound to (empty without a thread hierarchy).

        >>> from tilecraft.target.hierarchy import ThreadHierarchy
        >>> threads = ThreadHierarchy(axes=[{"name": "group_id.x", "scope": "grid", "dim": 0,
        ...                                  "max_extent": 1 << 16}],
        ...                           max_threads_per_block=256, subgroup_size=16)
        >>> options = LoweringOptions(threads=threads)
        >>> options.bindable_axes, options.subgroup_size
        (('group_id.x',), 16)
        """
        return self.threads.axis_names if self.threads is not None else ()

    @property
    def subgroup_size(self) -> int:
        """Threads that run in lockstep (a warp); 1 without a thread hierarchy."""
        return self.threads.subgroup_size if self.threads is not None else 1

    @property
    def parallel_threshold(self) -> int:
        return self.min_parallel_extent if self.min_parallel_extent is not None else 4 * self.cores

    @classmethod
    def from_spec(cls, spec: Any, **overrides: Any) -> LoweringOptions:
        """Options for a target spec; keyword arguments override the derived values."""
        levels = list(spec.memory.levels)
        if not levels:
            raise LoweringError(f"target {getattr(spec, 'name', spec)!r} declares no memory "
                                "levels; lowering needs at least the level kernel parameters "
                                "live in")
        primitives = {str(getattr(p, "value", p)) for p in getattr(spec, "primitives", ())}
        kinds = getattr(spec, "loop_kinds", None)
        kind_names = None if kinds is None else {str(getattr(k, "value", k)) for k in kinds}

        def offers(primitive: str, kind: LoopKind | None) -> bool:
            if primitive not in primitives:
                return False
            return kind is None or kind_names is None or kind.value in kind_names

        innermost = levels[-1] if len(levels) > 1 else None
        compute = spec.compute
        derived: dict[str, Any] = {
            "param_level": levels[0].name,
            "register_level": innermost.name if innermost is not None else None,
            "register_bytes": getattr(innermost, "size_bytes", None) if innermost else None,
            "vector_lanes": compute.lanes,
            "cores": int(getattr(compute, "cores", 1) or 1),
            "parallel": offers("parallel", LoopKind.PARALLEL),
            "vectorize": offers("vectorize", LoopKind.VECTOR),
            "unroll_limit": 8 if offers("unroll", LoopKind.UNROLLED) else 0,
            "loop_kinds": None if kinds is None else frozenset(
                LoopKind(name) for name in kind_names if name in LoopKind._value2member_map_),
            "threads": getattr(spec, "threads", None),
            "spec": spec,
        }
        derived.update(overrides)
        return cls(**derived)


__all__ = ["LanesSpec", "LoweringOptions"]
