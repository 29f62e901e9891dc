"""Schedule builders: how a worker turns ``(graph, schedule, target)`` into Kernel IR.

A :class:`~tilecraft.tuning.candidate.MeasureInput` names its builder by reference
(``"module:function"``), so it crosses into worker processes as text. The default,
:func:`lower_trace`, replays a schedule's trace (FlexTensor's one schedule representation:
the primitives applied, as JSON) and gives every compute the trace leaves alone the lowering
strategy its target selects; builders for the targets' templates and for search-space configs
(``tilecraft.schedule``) have the same signature.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower import LoweringOptions, lower_compute
from tilecraft.target.base import Target
from tilecraft.tuning.workload import TuningError

__all__ = ["DEFAULT_BUILDER", "SCHEDULE_BUILDER", "TEMPLATE_BUILDER", "Builder",
           "lower_compute_with_config", "lower_trace", "lower_with_configs",
           "lower_with_templates"]

#: ``builder(graph, schedule, target) -> kernels in execution order``
Builder = Callable[[Graph, Any, Target], Sequence[Kernel]]

DEFAULT_BUILDER = "tilecraft.tuning.builders:lower_trace"


def lower_trace(graph: Graph, schedule: Any, target: Target) -> list[Kernel]:
    """The default :data:`Builder`: ``schedule`` is a schedule's trace (``Schedule.trace``, a
    list of primitive steps, or ``{"trace": steps}`` as records store it, ``{}`` for none), a
    :class:`~tilecraft.schedule.Schedule` (its trace), or ``None``. The steps are replayed on a
    schedule of ``graph``; every stage they leave untouched that is computed in its own
    kernel gets the lowering strategy ``target``'s spec selects.

    """
    from tilecraft.schedule import Schedule, create_schedule
    from tilecraft.schedule.strategies import strategy_for
    from tilecraft.schedule.trace import replay

    if isinstance(schedule, Schedule):
        schedule = schedule.trace
    if isinstance(schedule, Mapping) and set(schedule) <= {"trace"}:
        schedule = schedule.get("trace")  # as records store it; {}: no steps
    if schedule is not None and not isinstance(schedule, (list, tuple)):
        raise TuningError(f"the default builder takes a schedule's trace (a list of steps), a "
                          f"Schedule or None, got {type(schedule).__name__}; pass another "
                          "builder for other schedule forms")
    options = LoweringOptions.from_spec(target.spec)
    scheduled = create_schedule(graph, options)
    replay(scheduled, list(schedule or ()))
    strategy = strategy_for(options)
    for stage in list(scheduled.stages):
        if _untouched(scheduled, stage):
            strategy.apply(scheduled, stage.tensor, options)
    return scheduled.lower(options)


def _untouched(schedule: Any, stage: Any) -> bool:
    """Whether no primitive has changed ``stage``: its own kernel, its axes' loops as created,
    no caches, buffers or stages computed inside it."""
    from tilecraft.schedule.stage_base import AttachKind

    attached = any(other.attach.kind is AttachKind.AT and other.attach.stage == stage.name
                   for other in schedule.stages)
    return (stage.attach.kind is AttachKind.ROOT and stage.cache is None and not attached
            and not stage.relations and not stage.annotations and stage.streaming is None
            and stage.level is None and not stage.read_buffers and not stage.partitions
            and len(stage.root_loops) == len(stage.tensor.axes) + len(stage.tensor.reduce_axes)
            and list(stage.leaf_loops) == list(stage.root_loops))


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
