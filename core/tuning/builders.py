"""Schedule builders: how a worker turns ``(graph, schedule, target)`` into Kernel IR.

A :class:`~tilecraft.tuning.candidate.MeasureInput` names its builder by reference
(``"module:function"``), so it crosses into worker processes as text. The default,
:func:`lower_loop_nests`, lowers :class:`~tilecraft.lower.LoopNestSchedule` payloads (or their
JSON form) with :func:`~tilecraft.lower.lower_graph`; a builder for schedule traces or
search-space configs (``tilecraft.schedule``) has the same signature.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel, LoopKind
from tilecraft.lower import (
    LoopNestSchedule,
    LoweringOptions,
    ScheduledLoop,
    lower_compute,
    lower_graph,
)
from tilecraft.target.base import Target
from tilecraft.tuning.workload import TuningError

__all__ = ["DEFAULT_BUILDER", "SCHEDULE_BUILDER", "TEMPLATE_BUILDER", "Builder",
           "loop_nest_from_json", "lower_compute_with_config", "lower_with_configs",
           "loop_nest_to_json", "lower_loop_nests", "lower_with_templates"]

#: ``builder(graph, schedule, target) -> kernels in execution order``
Builder = Callable[[Graph, Any, Target], Sequence[Kernel]]

DEFAULT_BUILDER = "tilecraft.tuning.builders:lower_loop_nests"


def loop_nest_to_json(schedule: LoopNestSchedule) -> dict[str, Any]:
    """A loop-nest schedule as JSON (what records store and the default builder accepts).

    >>> nest = LoopNestSchedule((ScheduledLoop((0,), LoopKind.PARALLEL),
    ...                          ScheduledLoop((1,), LoopKind.VECTOR, lanes=16)))
    >>> loop_nest_to_json(nest)["loops"][1]
    {'axes': [1], 'kind': 'vector', 'lanes': 16}
    >>> loop_nest_from_json(loop_nest_to_json(nest)) == nest
    True
    """
    loops = []
    for loop in schedule.loops:
        entry: dict[str, Any] = {"axes": list(loop.axes), "kind": loop.kind.value}
        if loop.lanes:
            entry["lanes"] = loop.lanes
        if loop.axis is not None:
            entry["axis"] = loop.axis
        if loop.initiation_interval is not None:
            entry["initiation_interval"] = loop.initiation_interval
        loops.append(entry)
    return {"loops": loops, "local_accumulator": schedule.local_accumulator}


def loop_nest_from_json(data: Mapping[str, Any]) -> LoopNestSchedule:
    """The inverse of :func:`loop_nest_to_json`."""
    try:
        loops = tuple(ScheduledLoop(tuple(entry["axes"]), LoopKind(entry.get("kind", "serial")),
                                    int(entry.get("lanes", 0)), entry.get("axis"),
                                    entry.get("initiation_interval"))
                      for entry in data["loops"])
    except (KeyError, TypeError, ValueError) as err:
        raise TuningError(f"not a loop-nest schedule in JSON form ({type(err).__name__}: "
                          f"{err}): {data!r}; write it with loop_nest_to_json") from None
    return LoopNestSchedule(loops, bool(data.get("local_accumulator", False)))


def lower_loop_nests(graph: Graph, schedule: Any, target: Target) -> list[Kernel]:
    """The default :data:`Builder`: ``schedule`` maps compute names to a
    :class:`~tilecraft.lower.LoopNestSchedule` (or its JSON form); computes not named, or a
    ``None`` schedule, get the default schedule."""
    nests: dict[str, LoopNestSchedule] = {}
    if schedule is not None:
        if not isinstance(schedule, Mapping):
            raise TuningError(f"the default builder takes a mapping from compute name to loop-"
                              f"nest schedule, got {type(schedule).__name__}; pass another "
                              "builder for other schedule forms")
        for name, nest in schedule.items():
            nests[name] = nest if isinstance(nest, LoopNestSchedule) \
                else loop_nest_from_json(nest)
    return lower_graph(graph, LoweringOptions.from_spec(target.spec), nests)


TEMPLATE_BUILDER = "tilecraft.tuning.builders:lower_with_templates"


def lower_with_templates(graph: Graph, schedule: Any, target: Target) -> list[Kernel]:
    """A :data:`Builder` for the targets' schedule templates: ``schedule`` maps compute names
    to template parameters (``Target.lower_compute``'s ``config``, e.g. the x86 micro-kernel
    template's ``{"MI": 6, "NR": 64, "KC": 256, "MC": 96}``); other computes get the target's
    own choice, then the core's default lowering. Fusion is not applied: each compute is tuned
    on its own."""
    configs = dict(schedule or {})
    options = LoweringOptions.from_spec(target.spec)
    names = {t.name for t in graph.computes}
    unknown = sorted(set(configs) - names)
    if unknown:
        raise TuningError(f"template parameters given for {', '.join(unknown)}, which are not "
                          f"computes of the graph ({', '.join(sorted(names))})")
    kernels: list[Kernel] = []
    for tensor in graph.computes:
        lowered = target.lower_compute(tensor, options, configs.get(tensor.name))
        kernels.extend(lowered or [lower_compute(tensor, options)])
    return kernels


SCHEDULE_BUILDER = "tilecraft.tuning.builders:lower_with_configs"


def lower_with_configs(graph: Graph, schedule: Any, target: Target) -> list[Kernel]:
    """A :data:`Builder` for FlexTensor's generic space: ``schedule`` maps compute names to
    configurations of :func:`tilecraft.search.generate_space` (``{"split": ..., "reorder":
    ...}``), applied with :func:`tilecraft.schedule.apply_config`; other computes keep the
    default schedule."""
    from tilecraft.schedule import apply_config, create_schedule

    schedule_ = create_schedule(graph, target.spec)
    tensors = {t.name: t for t in graph.computes}
    for name, config in dict(schedule or {}).items():
        if name not in tensors:
            raise TuningError(f"a schedule configuration is given for {name}, which is not a "
                              f"compute of the graph ({', '.join(sorted(tensors))})")
        apply_config(schedule_, tensors[name], config)
    return schedule_.lower(target)


def lower_compute_with_config(graph: Graph, tensor: Any, config: Mapping[str, Any],
                              target: Target) -> list[Kernel]:
    """The kernels computing ``tensor`` alone under a generic configuration (its producers are
    lowered on their own; an inlined producer is recomputed inside)."""
    kernels = lower_with_configs(graph, {tensor.name: config}, target)
    own = [k for k in kernels if tensor.name in k.outputs or
           k.attrs.get("compute") == tensor.name]
    if not own:
        raise TuningError(f"the configuration of {tensor.name} produced no kernel writing it")
    start = kernels.index(own[0])
    return kernels[start:kernels.index(own[-1]) + 1]
