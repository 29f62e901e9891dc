"""``grad``: gradients of a te output with respect to tensors it reads, through every compute
in between (reverse order, each compute's gradient from its index functions).

>>> import numpy as np
>>> import tilecraft as tc
>>> from tilecraft import te
>>> A = te.placeholder((2, 3), name="A")
>>> B = te.placeholder((3, 4), name="B")
>>> k = te.reduce_axis(3, name="k")
>>> C = te.compute((2, 4), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> dA, dB = grad(C, [A, B])
>>> print(dA.statement())
grad_A[i, j] = sum(grad_C[i, r_j] * B[j, r_j], axis=[r_j])
>>> a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
>>> tc.reference.run(dA, B=b, grad_C=np.ones((2, 4), np.float32))[0]
array([4., 4., 4.], dtype=float32)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from tilecraft.autodiff.operator import add_all, check_differentiable, compute_gradient
from tilecraft.errors import AutodiffError, AutodiffWarning
from tilecraft.te.expr import Const
from tilecraft.te.tensor import Tensor, compute, placeholder


def _topological(output: Tensor) -> list[Tensor]:
    order: list[Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(output, False)]
    while stack:
        tensor, done = stack.pop()
        if done:
            order.append(tensor)
            continue
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        stack.append((tensor, True))
        stack.extend((producer, False) for producer in reversed(tensor.inputs)
                     if id(producer) not in seen)
    return order  # producers first


def zeros_like(tensor: Tensor, name: str) -> Tensor:
    return compute(tensor.shape, lambda *z: Const(0.0, tensor.dtype), name=name)


def gradient_totals(output: Tensor, wrt: Sequence[Tensor],
                    grad_output: Tensor) -> dict[int, Tensor]:
    """The gradient of every tensor on a path from ``wrt`` to ``output`` (by ``id``), each
    the sum of its consumers' contributions (``grad_<name>``); what :func:`grad` and the
    graph-level :func:`tilecraft.autodiff.backward` read."""
    order = _topological(output)
    on_path = {id(t) for t in wrt}
    for tensor in order:  # producers first: a tensor is on a path if it reads one
        if any(id(p) in on_path for p in tensor.inputs):
            on_path.add(id(tensor))
    if id(output) in on_path and not output.dtype.is_float:
        check_differentiable(output, output)
    contributions: dict[int, list[Tensor]] = {id(output): [grad_output]}
    totals: dict[int, Tensor] = {}
    wanted = {id(t) for t in wrt}
    for tensor in reversed(order):
        pieces = contributions.get(id(tensor))
        if not pieces or id(tensor) not in on_path:
            continue
        total = add_all(pieces, f"grad_{tensor.name}") if tensor is not output else pieces[0]
        renamed = f"grad_{tensor.name}"
        if id(tensor) in wanted and total is not grad_output and total.name != renamed:
            total = Tensor(renamed, total.shape, total.dtype, total.op)
        totals[id(tensor)] = total
        if tensor.is_placeholder:
            continue
        for producer in tensor.inputs:
            if id(producer) not in on_path:
                continue
            if not tensor.dtype.is_float or not producer.dtype.is_float:
                check_differentiable(tensor, producer)
            name = f"grad_{producer.name}_via_{tensor.name}"
            piece = compute_gradient(tensor, total, producer, name=name)
            if piece is not None:
                contributions.setdefault(id(producer), []).append(piece)
    return totals


def grad(output: Tensor, wrt: Sequence[Tensor], grad_output: Tensor | None = None, *,
         strict: bool = False) -> list[Tensor]:
    """One gradient compute per tensor of ``wrt``: ``d(sum(output * grad_output))/d(t)``.

    ``grad_output`` defaults to a placeholder ``grad_<output>`` of the output's shape and
    dtype. A tensor of ``wrt`` that ``output`` does not depend on gets zeros and an
    :class:`~tilecraft.errors.AutodiffWarning` (an :class:`~tilecraft.errors.AutodiffError`
    with ``strict=True``). Integer or non-differentiable computes on the way raise an
    ``AutodiffError`` naming them.
    """
    if isinstance(wrt, Tensor):
        wrt = [wrt]
    if grad_output is None:
        grad_output = placeholder(output.shape, output.dtype, name=f"grad_{output.name}")
    if grad_output.shape != output.shape:
        raise AutodiffError(f"grad_output {grad_output.name} has shape {grad_output.shape}, "
                            f"but {output.name} has shape {output.shape}; pass the gradient "
                            "of the output, of the output's shape")
    totals = gradient_totals(output, wrt, grad_output)
    results = []
    for tensor in wrt:
        if tensor is output:
            results.append(grad_output)
            continue
        if id(tensor) in totals:
            results.append(totals[id(tensor)])
            continue
        message = (f"{output.name} does not depend on {tensor.name}: its gradient is zero")
        if strict:
            raise AutodiffError(message + " (strict=True); drop it from wrt")
        warnings.warn(message, AutodiffWarning, stacklevel=2)
        results.append(zeros_like(tensor, f"grad_{tensor.name}"))
    return results
