"""Operator-level automatic differentiation by solving index equations (thesis §4.6.1).

``grad(output, wrt)`` derives each gradient as new te computes from the forward index
functions — Smith normal form over the integers, floordiv/mod pairs recombined, free
solutions as new reduce loops, the chain rule through the body — not from a table of
per-operator gradients. ``compute_gradient`` is the one-compute step the graph-level
``backward(graph, loss)`` chains (the forward activations it reads kept as outputs);
``sgd_step`` makes forward + backward + update one graph and ``compile_step`` compiles it with
the training fusion decisions of §4.6.2 (:mod:`tilecraft.autodiff.fusion`) in the report.
"""

from tilecraft.autodiff.backward import BackwardGraph, backward
from tilecraft.autodiff.grad import grad, zeros_like
from tilecraft.autodiff.operator import compute_gradient
from tilecraft.autodiff.smith import smith_normal_form
from tilecraft.autodiff.training import TrainingStep, compile_step, sgd_step

__all__ = ["BackwardGraph", "TrainingStep", "backward", "compile_step", "compute_gradient", "grad",
           "sgd_step", "smith_normal_form", "zeros_like"]
