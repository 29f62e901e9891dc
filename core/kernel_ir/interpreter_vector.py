"""Running an innermost loop whose body is one store as numpy operations over all iterations.

This is the interpreter's fast path. It applies only where it provably gives the result of
running the iterations one after another:

- the store's target moves injectively with the loop variable (some index is affine in it
  with a non-zero coefficient), and the stored value reads the target buffer, if at all, only
  at the target location; or
- the store accumulates into a location that does not depend on the loop variable (a
  reduction, as in a VECTOR reduction loop); the values are then combined in iteration order
  (``np.add.accumulate`` is sequential, so even float sums round as the scalar loop would).

Anything else — or a vector evaluation that would read outside a buffer (e.g. the untaken
side of a select) — runs the ordinary scalar loop instead.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tilecraft.kernel_ir.concurrency import LaneReduce
from tilecraft.kernel_ir.interpreter_expr import (
    Env,
    ExprCompiler,
    VectorFallback,
    combine_fn,
    is_half,
    lane_indices,
)
from tilecraft.kernel_ir.nodes import BufferLoad, Store, walk_expr
from tilecraft.te.bounds import affine
from tilecraft.te.expr import ReduceOp, Var

VectorLoop = Callable[[Env, int], bool]


def compile_vector_store(exprs: ExprCompiler, store: Store, var: Var,
                         slot: int) -> VectorLoop | None:
    """A function ``run(env, count) -> bool`` executing ``for var in range(count): store``
    at once (returning False when it must fall back to the scalar loop), or ``None`` when the
    store is not of a form that can be run this way."""
    index_nodes = [node for index in store.indices for node in walk_expr(index)]
    if any(isinstance(node, BufferLoad) for node in index_nodes):
        return None
    if store.buffer.lanes > 1 or any(
            isinstance(node, LaneReduce) or (isinstance(node, BufferLoad) and node.buffer.lanes > 1)
            for node in walk_expr(store.value)):
        return None  # vector element types: every value is already an array of lanes
    target_moves = var in index_nodes
    own_reads = [node for node in walk_expr(store.value)
                 if isinstance(node, BufferLoad) and node.buffer is store.buffer]
    if target_moves:
        if not _injective(store, var):
            return None
        if any(read.indices != store.indices for read in own_reads):
            return None
        return _compile_elementwise(exprs, store, slot)
    if store.accumulate is None or own_reads:
        return None
    return _compile_reduction(exprs, store, slot)


def _injective(store: Store, var: Var) -> bool:
    for index in store.indices:
        form = affine(index)
        if form is not None and form.terms().get(var, 0) != 0:
            return True
    return False


def _compile_elementwise(exprs: ExprCompiler, store: Store, slot: int) -> VectorLoop:
    buffer = store.buffer
    target = exprs.buffer_slot(buffer, store)
    index = exprs.index(buffer, store.indices, "vector store", vector=True)
    value = exprs.compile(store.value, vector=True)
    combine = (combine_fn(store.accumulate, buffer.dtype, vector=True)
               if store.accumulate is not None else None)
    widen = is_half(buffer.dtype)

    def run(env: Env, count: int) -> bool:
        env[slot] = lane_indices(count)
        try:
            where = index(env)
            values = value(env)
        except VectorFallback:
            return False
        array = env[target]
        if combine is None:
            array[where] = values
        else:
            old = array[where]
            array[where] = combine(old.astype(np.float32) if widen else old, values)
        return True

    return run


def _compile_reduction(exprs: ExprCompiler, store: Store, slot: int) -> VectorLoop:
    buffer = store.buffer
    target = exprs.buffer_slot(buffer, store)
    index = exprs.index(buffer, store.indices, f"accumulating store into {buffer.name}")
    value = exprs.compile(store.value, vector=True)
    op = store.accumulate
    assert op is not None
    compute = buffer.dtype.compute_numpy
    combine = combine_fn(op, buffer.dtype, vector=True)
    half = is_half(buffer.dtype)
    storage = buffer.dtype.numpy.type

    def run(env: Env, count: int) -> bool:
        env[slot] = lane_indices(count)
        try:
            values = value(env)
        except VectorFallback:
            return False
        values = np.broadcast_to(np.asarray(values, dtype=compute), (count,))
        array = env[target]
        where = index(env)
        if half:  # every partial result is rounded to the storage type, as the loop would
            total = np.float32(array[where])
            for item in values:
                total = np.float32(storage(combine(total, item)))
            array[where] = total
        elif op in (ReduceOp.SUM, ReduceOp.PROD):  # in loop order, as the scalar loop rounds
            chain = np.concatenate((np.asarray([array[where]], dtype=compute), values))
            ufunc = np.add if op is ReduceOp.SUM else np.multiply
            array[where] = ufunc.accumulate(chain, dtype=compute)[-1]
        else:
            array[where] = combine(array[where], combine.reduce(values))
        return True

    return run


__all__ = ["VectorLoop", "compile_vector_store"]
