"""Tuning tasks: each compute tuned as its own workload.

The tuner measures, the database keys, and compile (:func:`~tilecraft.tuning.tuner.best_configs`)
and overlapped execution read back every compute *alone*: the compute with each compute it
reads replaced by a placeholder of the same name, shape and dtype (:func:`isolate`). Constants
(``te.constant``) stay constants: their values belong to the compute (a target may treat a
constant operand differently, e.g. pack it once). A candidate therefore runs that compute's
kernels only — not the network up to it — so the cost of tuning a network grows with its
number of computes, not with the square of its depth, and a candidate's time and GFLOP/s are
the compute's own. :func:`task_key` is the one database key of a compute, used by all of them.

The tuner tunes single computes: the computes of a fusion group or mapped onto an intrinsic
are skipped by the pipeline (their schedule is the group's or the mapping's), so a task never
needs its producers or consumers to keep a fused epilogue.

Old databases: before this, a compute was keyed by its whole producer graph
(``Graph.from_outputs([t])``). A compute that reads only graph inputs has the same key as
before; the records of one that reads another compute are under a key nothing asks for any
more, so they are simply not found (the compute counts as untuned; tuning it again writes
records under the new key). Records written by an overlapped compile, which isolated its
computes the same way already, are found.

>>> from tilecraft import te
>>> A = te.placeholder((4,), name="A")
>>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
>>> C = te.compute((4,), lambda i: B[i] + 1.0, name="C")
>>> print(isolate(C))
graph(B: float32[4]) -> (C):
  C[i] = B[i] + 1.0
>>> task_key(C) == task_key(isolate(C).outputs[0])
True
"""

from __future__ import annotations

from tilecraft.graph import Graph
from tilecraft.te.tensor import Tensor

__all__ = ["isolate", "task_key"]


def isolate(tensor: Tensor) -> Graph:
    """``tensor`` alone: a graph computing it from placeholders named, shaped and typed like
    the computes it reads (constants kept). Costs nothing in the size of the graph above it."""
    from tilecraft.passes.rewriting import relink
    from tilecraft.te.tensor import placeholder

    cut = {producer: placeholder(producer.shape, producer.dtype, name=producer.name)
           for producer in tensor.inputs if not producer.is_placeholder}
    return Graph.from_outputs([relink(tensor, cut) if cut else tensor])


def task_key(tensor: Tensor) -> str:
    """The tuning-database key of ``tensor``'s task: the
    :func:`~tilecraft.tuning.record.workload_key` of :func:`isolate` ``(tensor)``."""
    from tilecraft.tuning.record import workload_key
    from tilecraft.tuning.workload import describe_graph

    return workload_key(describe_graph(isolate(tensor)))
