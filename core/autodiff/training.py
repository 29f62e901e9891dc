"""A training step as one program (issue 18 item 5): forward, backward and the SGD update,
compiled as ONE Executable — parameters (and data) in, the loss and the updated parameters out.

>>> import numpy as np
>>> import tilecraft as tc
>>> from tilecraft import ops, te
>>> x = te.placeholder((4, 3), name="x")
>>> w = te.placeholder((2, 3), name="w")
>>> loss = ops.mean(ops.mul(ops.dense(x, w, name="y"), ops.dense(x, w, name="y2"), name="sq"),
...                 name="loss")
>>> step = sgd_step(tc.Graph.from_outputs([loss]), loss, [w], lr=0.1)
>>> [t.name for t in step.graph.outputs]
['loss', 'w_next']
>>> xs, ws = np.ones((4, 3), np.float32), np.full((2, 3), 0.5, np.float32)
>>> value, w_next = tc.reference.run(step.graph, x=xs, w=ws)
>>> float(value), round(float(w_next[0, 0]), 6)  # 1.5 ** 2; 0.5 - 0.1 * 4 * (2 * 1.5) / 8
(2.25, 0.35)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tilecraft.autodiff.backward import BackwardGraph, backward
from tilecraft.errors import AutodiffError
from tilecraft.graph import Graph
from tilecraft.te.expr import Const
from tilecraft.te.tensor import Tensor, compute


@dataclass(frozen=True)
class TrainingStep:
    """``graph``: outputs the loss, then ``updated`` (``<param>_next`` per parameter, in
    order); ``backward``: the gradient graph it was built from."""

    graph: Graph
    params: tuple[Tensor, ...]
    updated: tuple[Tensor, ...]
    backward: BackwardGraph
    lr: float


def sgd_step(graph: Graph, loss: Tensor | str, params: Sequence[Tensor | str],
             lr: float) -> TrainingStep:
    """Plain SGD, ``p_next = p - lr * dloss/dp`` for each of ``params`` (placeholders of
    ``graph``), as one graph with the forward and backward computes."""
    if not lr > 0:
        raise AutodiffError(f"sgd_step: learning rate {lr!r}; give a positive lr")
    targets = [graph.tensor(p) if isinstance(p, str) else p for p in params]
    for p in targets:
        if not p.is_placeholder or p.is_constant:
            raise AutodiffError(f"sgd_step: parameter {p.name} is a compute or a constant; "
                                "parameters are placeholders the caller passes")
    bw = backward(graph, loss, targets, keep_activations=False)
    updated = []
    for p, g in zip(targets, bw.gradients):
        def body(*i: Any, p: Tensor = p, g: Tensor = g) -> Any:
            return p[i] - Const(float(lr), p.dtype) * g[i]

        updated.append(compute(p.shape, body, name=f"{p.name}_next"))
    program = Graph.from_outputs([bw.loss, *updated])
    return TrainingStep(program, tuple(targets), tuple(updated), bw, float(lr))


def compile_step(step: TrainingStep, target: Any, **options: Any):
    """``tc.compile(step.graph, target, **options)`` with the training fusion decisions of
    thesis §4.6.2 (:func:`tilecraft.autodiff.fusion.decide`, from the target's spec) added to
    the report's notes."""
    from tilecraft.api import _resolve_target
    from tilecraft.api import compile as compile_program
    from tilecraft.autodiff.fusion import decide

    tgt = _resolve_target(target)
    exe = compile_program(step.graph, tgt, **options)
    exe.report.notes.extend(str(d) for d in decide(step.backward, tgt.spec).values())
    return exe


__all__ = ["TrainingStep", "compile_step", "sgd_step"]
