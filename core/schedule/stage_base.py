"""The state of one stage of a schedule, and the helpers its primitives share.

A stage is one compute of the program as the schedule sees it: its te body (loads may be
redirected to cache stages), its loops (roots, relations, leaves in order), the annotation of
each leaf, where it is computed (its own kernel, inlined, or inside another stage's loop), and
the memory placement of its buffer. The primitives live in :mod:`.transforms`,
:mod:`.annotations` and :mod:`.placement`; :class:`~tilecraft.schedule.stage.Stage` puts them
together.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tilecraft.kernel_ir.nodes import ArrayPartition
from tilecraft.schedule.errors import schedule_error
from tilecraft.schedule.loop import SERIAL, Loop, LoopAnnotation, Relation, Split
from tilecraft.target.spec import SchedulePrimitive
from tilecraft.te.expr import AxisKind, Expr, IterVar
from tilecraft.te.tensor import Tensor

if TYPE_CHECKING:
    from tilecraft.schedule.schedule import Schedule

LoopRef = Loop | str


class AttachKind(str, enum.Enum):
    ROOT = "root"        # its own kernel
    INLINE = "inline"    # substituted into its consumers
    AT = "at"            # computed inside another stage's loop (None: before its loops)


@dataclass(frozen=True)
class Attach:
    kind: AttachKind = AttachKind.ROOT
    stage: str | None = None
    loop: Loop | None = None
    explicit: bool = True

    def describe(self) -> str:
        if self.kind is not AttachKind.AT:
            return self.kind.value
        return f"at {self.stage}.{self.loop.name if self.loop else '<root>'}"


@dataclass(frozen=True)
class Streaming:
    """A stage lowered as a dataflow region (``dataflow``): the initiation interval of each
    stage's innermost loop and the depth of the streams between the stages."""

    initiation_interval: int = 1
    depth: int = 2


class StageBase:
    """State and shared helpers of a stage (see the module docstring)."""

    def __init__(self, schedule: Schedule, tensor: Tensor, body: Expr,
                 cache: str | None = None) -> None:
        self.schedule = schedule
        self.tensor = tensor
        self.body = body
        self.cache = cache
        self.iter_vars: dict[Loop, IterVar] = {}
        spatial, reduce = [], []
        for axis in tensor.axes:
            loop = Loop(axis.name, axis.extent, tensor.name, AxisKind.SPATIAL)
            self.iter_vars[loop] = axis
            spatial.append(loop)
        for axis in tensor.reduce_axes:
            loop = Loop(axis.name, axis.extent, tensor.name, AxisKind.REDUCE)
            self.iter_vars[loop] = axis
            reduce.append(loop)
        names = [loop.name for loop in spatial + reduce]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise schedule_error("create_schedule", tensor.name, duplicates[0],
                                 f"two axes of compute {tensor.name} are named "
                                 f"{duplicates[0]!r}; give every spatial and reduce axis its "
                                 "own name so the schedule can refer to its loops")
        self._axes = tuple(spatial)
        self._reduce_axes = tuple(reduce)
        self.relations: list[Relation] = []
        self.leaves: list[Loop] = spatial + reduce
        self.annotations: dict[Loop, LoopAnnotation] = {}
        self.attach = Attach()
        self.level: str | None = None
        self.read_buffers: dict[str, str] = {}
        self.write_buffer: str | None = None
        self.partitions: list[ArrayPartition] = []
        self.streaming: Streaming | None = None
        self._loops_by_name: dict[str, Loop] = {loop.name: loop for loop in self.leaves}

    # public views ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.tensor.name

    @property
    def axes(self) -> tuple[Loop, ...]:
        """The root loops of the spatial axes (one per output dimension)."""
        return self._axes

    @property
    def reduce_axes(self) -> tuple[Loop, ...]:
        """The root loops of the reduce axes."""
        return self._reduce_axes

    @property
    def root_loops(self) -> tuple[Loop, ...]:
        return self._axes + self._reduce_axes

    @property
    def leaf_loops(self) -> tuple[Loop, ...]:
        """The loops lowering emits, outermost first."""
        return tuple(self.leaves)

    @property
    def is_reduction(self) -> bool:
        return bool(self._reduce_axes)

    def loop(self, name: str) -> Loop:
        """The loop of this stage called ``name`` (root, intermediate or leaf)."""
        try:
            return self._loops_by_name[name]
        except KeyError:
            raise schedule_error("lookup", self.name, name, f"stage {self.name} has no loop "
                                 f"named {name!r} (its leaf loops: {self._leaf_names()})") from None

    def annotation(self, loop: Loop) -> LoopAnnotation:
        return self.annotations.get(loop, SERIAL)

    def describe(self) -> str:
        """The leaf loops with their kinds, outermost first, and the stage's placement."""
        parts = []
        for loop in self.leaves:
            annotation = self.annotation(loop)
            parts.append(f"{loop.name}: {annotation.describe(loop.extent)}")
        text = " > ".join(parts) or "(no loops)"
        if self.attach.kind is not AttachKind.ROOT:
            text += f"; {self.attach.describe()}"
        if self.streaming is not None:
            text += f"; dataflow(II={self.streaming.initiation_interval})"
        return text

    def __repr__(self) -> str:
        return f"Stage({self.name}: {self.describe()})"

    def drop_reduce_axes(self) -> None:
        """Forget the reduce loops (cache_write moved the reduction to the cache stage)."""
        for loop in self._reduce_axes:
            self.iter_vars.pop(loop, None)
            self._loops_by_name.pop(loop.name, None)
        self.leaves = [loop for loop in self.leaves if not loop.is_reduce]
        self._reduce_axes = ()

    # helpers for primitives --------------------------------------------------------------
    def _leaf_names(self) -> str:
        return ", ".join(loop.name for loop in self.leaves) or "(none)"

    def _resolve(self, verb: str, ref: Any) -> Loop:
        """``ref`` (a Loop or a loop name) as a loop of this stage, whatever its state."""
        if isinstance(ref, str):
            return self.loop(ref) if ref in self._loops_by_name else self._missing(verb, ref)
        if not isinstance(ref, Loop):
            raise schedule_error(verb, self.name, None, f"{ref!r} is not a loop; pass a Loop "
                                 f"handle of stage {self.name} (s[{self.name}].axes, the "
                                 "results of split/fuse) or its name")
        if ref.stage == self.name and self._loops_by_name.get(ref.name) is not ref:
            raise schedule_error(verb, self.name, ref.name, f"the loop is no longer a loop of "
                                 f"stage {self.name} (cache_write moves a stage's reduce loops "
                                 f"to the cache stage); use the loops of s[{self.name!r}] now: "
                                 f"{self._leaf_names()}")
        if ref.stage != self.name:
            raise schedule_error(verb, self.name, ref.name, f"the loop belongs to stage "
                                 f"{ref.stage}, not to stage {self.name}: loops of different "
                                 f"nests cannot be mixed; schedule it through s[{ref.stage!r}]")
        return ref

    def _missing(self, verb: str, name: str) -> Loop:
        raise schedule_error(verb, self.name, name, f"stage {self.name} has no loop named "
                             f"{name!r} (its leaf loops: {self._leaf_names()})")

    def _leaf(self, verb: str, ref: Any) -> Loop:
        """``ref`` as a current leaf loop of this stage."""
        loop = self._resolve(verb, ref)
        if loop not in self.leaves:
            replaced = self._replacement(loop)
            raise schedule_error(verb, self.name, loop.name, f"the loop was already replaced "
                                 f"({replaced}); use the loops that replaced it "
                                 f"(leaf loops: {self._leaf_names()})")
        return loop

    def _replacement(self, loop: Loop) -> str:
        for relation in self.relations:
            if isinstance(relation, Split) and relation.parent is loop:
                return f"split into {relation.outer.name} and {relation.inner.name}"
            if not isinstance(relation, Split) and loop in relation.loops:
                return f"fused into {relation.fused.name}"
        return "it is not a leaf"

    def _new_loop(self, verb: str, name: str, extent: int, kind: AxisKind) -> Loop:
        if not isinstance(name, str) or not name:
            raise schedule_error(verb, self.name, None, f"loop name {name!r} must be a "
                                 "non-empty string")
        if name in self._loops_by_name:
            raise schedule_error(verb, self.name, name, f"stage {self.name} already has a loop "
                                 f"named {name!r}; choose other names for the new loops")
        loop = Loop(name, extent, self.name, kind)
        self._loops_by_name[name] = loop
        return loop

    def _unannotated(self, verb: str, loops: Iterable[Loop]) -> None:
        for loop in loops:
            if loop in self.annotations:
                raise schedule_error(verb, self.name, loop.name, f"the loop is already "
                                     f"{self.annotations[loop].describe()}; transform loops "
                                     "first and annotate the resulting leaves afterwards")

    def _require(self, primitive: SchedulePrimitive, verb: str, loop: Loop | None) -> None:
        self.schedule.target.require(primitive, verb, self.name,
                                     loop.name if loop is not None else None)

    def _record(self, primitive: str, **args: Any) -> None:
        self.schedule.record({"primitive": primitive, "stage": self.name, **args})


def check_positive(verb: str, stage: str, loop: str | None, what: str, value: Any) -> int:
    """``value`` as an int >= 1, or a ScheduleError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise schedule_error(verb, stage, loop, f"{what} must be an int, got {value!r}")
    if value < 1:
        raise schedule_error(verb, stage, loop, f"{what} {value} must be at least 1")
    return value


__all__ = ["Attach", "AttachKind", "LoopRef", "StageBase", "Streaming", "check_positive"]
