"""What a schedule may ask of its target: primitives, loop kinds, lanes, memory levels.

A schedule checks every primitive against the target it is built for, when it knows one: the
spec given to :func:`~tilecraft.schedule.create_schedule`, and again the spec (or lowering
options) given to :meth:`~tilecraft.schedule.Schedule.lower`. Without either, anything goes
until lowering.

The target's spec answers through ``spec.offers(primitive)`` (thesis Table 4.1: which
primitives the target offers), ``spec.loop_kinds`` (which Kernel IR loops its code generator
expresses), ``spec.compute.lanes(dtype)``, ``spec.memory.names`` and one fixed decision read
here: ``vector_reduction: false`` says the target cannot vectorise a reduction loop (it keeps
no lane-wise partial results).

>>> from tilecraft.lower import LoweringOptions
>>> view = TargetView.of(LoweringOptions(vector_lanes=8, loop_kinds={"serial", "vector"}))
>>> view.lanes("float32"), view.allows_kind(LoopKind.PARALLEL)
(8, False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.lower.options import LoweringOptions
from tilecraft.schedule.errors import schedule_error
from tilecraft.target.spec import SchedulePrimitive

#: the Kernel IR loop kind each annotating primitive produces
PRIMITIVE_LOOP_KINDS = {
    SchedulePrimitive.UNROLL: LoopKind.UNROLLED,
    SchedulePrimitive.VECTORIZE: LoopKind.VECTOR,
    SchedulePrimitive.PARALLEL: LoopKind.PARALLEL,
    SchedulePrimitive.BIND: LoopKind.BOUND,
    SchedulePrimitive.PIPELINE: LoopKind.PIPELINED,
}


@dataclass(frozen=True)
class TargetView:
    """The target questions of a schedule, answered from a spec and/or lowering options."""

    spec: Any = None
    options: LoweringOptions | None = None

    @classmethod
    def of(cls, target: Any) -> TargetView:
        """A view of a TargetSpec, a Target (its ``.spec``), LoweringOptions or ``None``."""
        if target is None:
            return cls()
        if isinstance(target, LoweringOptions):
            return cls(target.spec, target)
        spec = getattr(target, "spec", None)
        if spec is not None and hasattr(spec, "primitives"):
            return cls(spec, None)
        if hasattr(target, "primitives") and hasattr(target, "memory"):
            return cls(target, None)
        raise schedule_error("lower", None, None,
                             f"{target!r} is not a target: pass a TargetSpec, a Target, "
                             "LoweringOptions or None")

    def lowering_options(self) -> LoweringOptions:
        if self.options is not None:
            return self.options
        if self.spec is not None:
            return LoweringOptions.from_spec(self.spec)
        return LoweringOptions()

    @property
    def name(self) -> str:
        return str(getattr(self.spec, "name", "the target"))

    @property
    def known(self) -> bool:
        return self.spec is not None or self.options is not None

    # questions ---------------------------------------------------------------------------
    def offers(self, primitive: SchedulePrimitive) -> bool:
        if self.spec is None:
            return True
        offers = getattr(self.spec, "offers", None)
        if offers is not None:
            return bool(offers(primitive))
        return primitive in tuple(self.spec.primitives)

    def allows_kind(self, kind: LoopKind) -> bool:
        if self.options is not None and not self.options.allows(kind):
            return False
        if self.spec is not None:
            kinds = {getattr(k, "value", k) for k in self.spec.loop_kinds}
            return kind.value in kinds
        return True

    def lanes(self, dtype: DType) -> int:
        if self.options is not None:
            return self.options.lanes(dtype)
        if self.spec is not None:
            return max(1, int(self.spec.compute.lanes(dtype)))
        return 16

    def vector_reduction(self, dtype: DType) -> str | None:
        """Why a reduction loop of ``dtype`` cannot be vectorised here (None when it can)."""
        if self.spec is not None and \
                getattr(self.spec, "fixed_decisions", {}).get("vector_reduction", True) is False:
            return (f"{self.name} fixes vector_reduction: false (it keeps no lane-wise partial "
                    "results)")
        if self.known and self.lanes(dtype) < 2:
            return f"{self.name} has a single lane for {dtype.value}"
        return None

    def threads(self) -> Any:
        """The target's thread hierarchy (``None`` without one, or without a target)."""
        if self.options is not None and self.options.threads is not None:
            return self.options.threads
        return getattr(self.spec, "threads", None) if self.spec is not None else None

    def levels(self) -> tuple[str, ...] | None:
        if self.spec is not None:
            return tuple(level.name for level in self.spec.memory.levels)
        return None

    # checks ------------------------------------------------------------------------------
    def require(self, primitive: SchedulePrimitive, verb: str, stage: str | None,
                loop: str | None) -> None:
        """Raise unless the target offers ``primitive`` and the loop kind it produces."""
        if not self.offers(primitive):
            offered = ", ".join(p.value for p in self.spec.primitives) or "none"
            raise schedule_error(verb, stage, loop, f"{self.name} does not offer the "
                                 f"{primitive.value} primitive (it offers {offered}); leave it "
                                 "out of the schedule for this target")
        kind = PRIMITIVE_LOOP_KINDS.get(primitive)
        if kind is not None and not self.allows_kind(kind):
            extra = ""
            if kind is LoopKind.BOUND:
                extra = " (it has no hardware threads to bind loops to)"
            raise schedule_error(verb, stage, loop, f"{self.name} cannot express {kind.value} "
                                 f"loops{extra}; use a loop kind its code generator knows")

    def require_level(self, verb: str, stage: str | None, level: str) -> None:
        if not isinstance(level, str) or not level:
            raise schedule_error(verb, stage, None, f"the memory level {level!r} must be a "
                                 "level name of the target's memory hierarchy")
        levels = self.levels()
        if levels is not None and level not in levels:
            raise schedule_error(verb, stage, None, f"{level!r} is not a memory level of "
                                 f"{self.name} (its levels: {', '.join(levels)}); pick one of "
                                 "those")


__all__ = ["PRIMITIVE_LOOP_KINDS", "TargetView"]
