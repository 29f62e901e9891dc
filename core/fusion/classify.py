"""Which computes are compute-intensive and which are memory-bound (thesis §3.1.3, §4.6.2).

A compute is *compute-intensive* when it is a sum of products of two or more loads with affine
indices in which every operand misses at least one of the compute's loops, so each operand
element is reused across that loop (GEMM, batch GEMM, convolution, bilinear). Everything else
is *memory-bound*: elementwise maps, broadcasts, row reductions (softmax's max and sum), padding,
GEMV and depthwise convolution (whose operands are indexed by every loop).

The decision reads the te expression only, never operator names.

>>> from tilecraft import te, ops
>>> A = te.placeholder((8, 4), name="A")
>>> B = te.placeholder((4, 6), name="B")
>>> x = te.placeholder((4,), name="x")
>>> is_compute_intensive(ops.matmul(A, B, name="C"))
True
>>> is_compute_intensive(ops.gemv(A, x, name="y"))
False
>>> is_compute_intensive(ops.relu(A, name="r"))
False
>>> flop_count(ops.matmul(A, B, name="C2"))
384
"""

from __future__ import annotations

from tilecraft.te.bounds import affine
from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Cast,
    Const,
    Expr,
    IterVar,
    Load,
    Reduce,
    ReduceOp,
    Select,
    Unary,
)
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import vars_in, walk


def product_loads(expr: Expr) -> list[Load] | None:
    """The loads of ``expr`` if it is a product of loads (casts and constant factors allowed),
    else ``None``."""
    if isinstance(expr, Cast):
        return product_loads(expr.x)
    if isinstance(expr, Load):
        return [expr]
    if isinstance(expr, Const):
        return []
    if isinstance(expr, Binary) and expr.op is BinaryOp.MUL:
        left, right = product_loads(expr.a), product_loads(expr.b)
        if left is None or right is None:
            return None
        return left + right
    return None


def non_intensive_reason(tensor: Tensor) -> str | None:
    """Why ``tensor`` is not compute-intensive, or ``None`` when it is."""
    if tensor.is_placeholder:
        return f"{tensor.name} is an input, not a compute"
    body = tensor.body
    if not isinstance(body, Reduce) or body.op is not ReduceOp.SUM:
        return f"{tensor.name} is not a sum reduction"
    loads = product_loads(body.body)
    if loads is None or len(loads) < 2:
        return f"{tensor.name} is not a sum of products of two or more loads"
    loops = set(tensor.axes) | set(body.axes)
    for load in loads:
        if any(affine(index) is None for index in load.indices):
            return (f"{tensor.name} reads {load.tensor.name} with a non-affine index; the tile "
                    "analysis needs affine indices")
        used = {v for index in load.indices for v in vars_in(index) if isinstance(v, IterVar)}
        if loops <= used:
            return (f"{tensor.name} reads every element of {load.tensor.name} once (no loop "
                    "reuses it), so it is memory-bound")
    return None


def is_compute_intensive(tensor: Tensor) -> bool:
    """Whether ``tensor`` is a compute-intensive operator (see the module docstring)."""
    return non_intensive_reason(tensor) is None


def iteration_points(tensor: Tensor) -> int:
    """Points of the iteration space: output size times the reduction extents."""
    if tensor.is_placeholder:
        return 0
    points = tensor.size
    for axis in tensor.reduce_axes:
        points *= axis.extent
    return points


def flop_count(tensor: Tensor) -> int:
    """Arithmetic operations of one evaluation: two per point for a sum of products (multiply
    and add), else the number of arithmetic nodes in the body per point (at least one)."""
    if tensor.is_placeholder:
        return 0
    if is_compute_intensive(tensor):
        return 2 * iteration_points(tensor)
    nodes = sum(1 for node in walk(tensor.body)
                if isinstance(node, (Binary, Unary, Select, Reduce)))
    return iteration_points(tensor) * max(1, nodes)


def is_elementwise_of(consumer: Tensor, producer: Tensor) -> bool:
    """Whether every load of ``producer`` in ``consumer`` reads the element at the consumer's
    own position (``consumer[i, j]`` reads ``producer[i, j]``): an epilogue that can run on the
    producer's tile as it is produced."""
    if consumer.is_placeholder or consumer.reduce_axes or consumer.shape != producer.shape:
        return False
    found = False
    for node in walk(consumer.body):
        if isinstance(node, Load) and node.tensor is producer:
            found = True
            if node.indices != consumer.axes:
                return False
    return found
