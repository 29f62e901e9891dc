"""Replaying a schedule from its trace.

``s.trace`` lists every primitive applied, as plain dicts naming stages, loops and tensors by
name (JSON-serialisable). :func:`replay` applies them again to a fresh schedule of the same
program, so a schedule can travel to a worker process or into the tuning database as data.

>>> import json
>>> from tilecraft import te
>>> from tilecraft.schedule import create_schedule
>>> A = te.placeholder((10,), name="A")
>>> B = te.compute((10,), lambda i: A[i] + 1.0, name="B")
>>> s = create_schedule(B)
>>> outer, inner = s[B].split(s[B].axes[0], factor=4)
>>> s[B].vectorize(inner)
>>> steps = json.loads(json.dumps(s.trace))
>>> steps[0]
{'primitive': 'split', 'stage': 'B', 'loop': 'i', 'factor': 4, 'nparts': None, \
'names': ['i.outer', 'i.inner']}
>>> again = replay(B, steps)
>>> str(again.lower()[0]) == str(s.lower()[0])
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tilecraft.graph import Graph
from tilecraft.schedule.errors import ScheduleError, schedule_error
from tilecraft.schedule.schedule import Schedule, create_schedule
from tilecraft.te.tensor import Tensor


def replay(program: Graph | Tensor | Sequence[Tensor] | Schedule,
           trace: Sequence[Mapping[str, Any]], spec: Any = None) -> Schedule:
    """A new schedule of ``program`` with the steps of ``trace`` applied in order (or the
    steps applied to ``program`` itself when it is a Schedule). Raises a
    :class:`~tilecraft.schedule.errors.ScheduleError` naming the step that does not fit."""
    schedule = program if isinstance(program, Schedule) else create_schedule(program, spec)
    for number, step in enumerate(trace):
        try:
            apply_step(schedule, step)
        except ScheduleError as err:
            raise ScheduleError(f"replaying step {number} ({step!r}): {err}") from err
    return schedule


def apply_step(schedule: Schedule, step: Mapping[str, Any]) -> None:
    """Apply one trace step to ``schedule``."""
    if not isinstance(step, Mapping) or "primitive" not in step:
        raise schedule_error("replay", None, None, f"{step!r} is not a trace step (a dict with "
                             "a 'primitive' key, as in Schedule.trace)")
    verb = step["primitive"]
    args = {key: value for key, value in step.items() if key not in ("primitive", "stage")}
    if verb in ("cache_read", "cache_write"):
        result = args.pop("result", None)
        tensor = args.pop("tensor")
        if verb == "cache_read":
            made = schedule.cache_read(tensor, args["level"], args.get("readers"))
        else:
            made = schedule.cache_write(tensor, args["level"])
        if result is not None and made.name != result:
            raise schedule_error("replay", None, None, f"{verb} made {made.name!r} where the "
                                 f"trace recorded {result!r}; replay a trace on the program it "
                                 "was recorded for")
        return
    stage = schedule.stage(step.get("stage"), verb)
    if verb == "split":
        names = args.get("names")
        stage.split(args["loop"], factor=args.get("factor"), nparts=args.get("nparts"),
                    names=tuple(names) if names is not None else None)
    elif verb == "fuse":
        stage.fuse(*args["loops"], name=args.get("name"))
    elif verb == "reorder":
        stage.reorder(*args["loops"])
    elif verb == "tile":
        stage.tile(args["x"], args["y"], args["x_factor"], args["y_factor"])
    elif verb == "unroll":
        stage.unroll(args["loop"], factor=args.get("factor"))
    elif verb == "vectorize":
        stage.vectorize(args["loop"], lanes=args.get("lanes"))
    elif verb == "parallel":
        stage.parallel(args["loop"])
    elif verb == "bind":
        stage.bind(args["loop"], args["thread_axis"])
    elif verb == "pipeline":
        stage.pipeline(args["loop"], initiation_interval=args["initiation_interval"])
    elif verb == "compute_inline":
        stage.compute_inline()
    elif verb == "compute_root":
        stage.compute_root()
    elif verb == "compute_at":
        parent = schedule.stage(args["parent"], verb)
        stage.compute_at(parent, args["loop"])
    elif verb == "buffer":
        stage.buffer(args["level"], tensors=args.get("tensors"))
    elif verb == "partition":
        stage.partition(args["dim"], args["kind"], args["factor"])
    elif verb == "dataflow":
        stage.dataflow(args["initiation_interval"], args["depth"])
    else:
        raise schedule_error("replay", stage.name, None, f"unknown primitive {verb!r} in the "
                             "trace")


__all__ = ["apply_step", "replay"]
