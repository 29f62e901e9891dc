"""Vector accesses of the GPU strategy: how many consecutive output elements one thread of an
elementwise, broadcast or other transpose-free kernel handles, so that its loads and its store
are whole vector accesses (128 bits on a GPU whose spec says ``compute.vector_bits: 128``: four
float32 or eight float16 lanes; CUDA's ``float4``).

A thread gets ``lanes`` elements (the spec's vector width for the output's dtype) of the
innermost output axis when that axis divides by ``lanes`` and every load that moves with it
walks memory contiguously along it, starting on a whole vector whatever the other axes are:
its last index is ``axis + (multiples of lanes)``, no other index mentions the axis, its
tensor's rows are whole vectors and its elements are as wide as the output's. A load that does
not move with the axis (a broadcast row value) is one scalar for all lanes. Anything else — a
transpose, a gather, ``j // 2``, a shifted window, a ragged row — keeps one element per thread.

>>> from tilecraft import te
>>> from tilecraft.lower import LoweringOptions
>>> options = LoweringOptions(vector_lanes={"float32": 4})
>>> A = te.placeholder((3, 8), name="A")
>>> b = te.placeholder((8,), name="b")
>>> vector_lanes(te.compute((3, 8), lambda i, j: A[i, j] + b[j], name="C"), options)
4
>>> vector_lanes(te.compute((8, 3), lambda i, j: A[j, i], name="T"), options)
1
"""

from __future__ import annotations

from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.lower.options import LoweringOptions
from tilecraft.te.bounds import affine_over_atoms
from tilecraft.te.expr import IterVar, Load
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import loads_in, vars_in

__all__ = ["vector_lanes"]


def vector_lanes(tensor: Tensor, options: LoweringOptions) -> int:
    """The output elements one thread computes as a vector (module docstring); 1 for scalar
    threads, always for a reduction (its threads accumulate, see the strategy)."""
    if not options.vectorize or not options.allows(LoopKind.VECTOR) or tensor.reduce_axes \
            or not tensor.axes:
        return 1
    lanes = options.lanes(tensor.dtype)
    axis = tensor.axes[-1]
    if lanes < 2 or axis.extent < lanes or axis.extent % lanes:
        return 1
    loads = [load for load in loads_in(tensor.body)
             if any(axis in vars_in(index) for index in load.indices)]
    if all(_whole_vectors(load, axis, lanes, tensor) for load in loads):
        return lanes
    return 1


def _whole_vectors(load: Load, axis: IterVar, lanes: int, tensor: Tensor) -> bool:
    """Whether ``load`` reads ``lanes`` consecutive, vector-aligned elements for each vector
    of ``axis`` (module docstring)."""
    *leading, last = load.indices
    if load.tensor.dtype.bytes != tensor.dtype.bytes or load.tensor.shape[-1] % lanes:
        return False
    if any(axis in vars_in(index) for index in leading):
        return False
    form = affine_over_atoms(last)
    if form is None or form.constant % lanes:
        return False
    for term, coefficient in form.coefs:
        if term == axis:
            if coefficient != 1:
                return False
        elif coefficient % lanes or axis in vars_in(term):
            return False
    return True
