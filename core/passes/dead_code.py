"""Dead-code elimination: computes no graph output depends on are removed.

A :class:`~tilecraft.graph.Graph` is built from its outputs, so every compute it holds is read
by something; what makes a compute dead is a read that is never taken. This pass decides the
conditions of ``select`` over the index ranges of the compute holding them (the "which part"
tests of a ``concat`` sliced inside one compute, border tests of a pad that cannot reach the
border): a condition that holds everywhere keeps only its true branch, one that never holds
only its false branch. Computes read only in the branches dropped, and everything only they
needed, leave the graph — but never a graph input: a pass keeps the graph's interface, so
selects whose pruning would drop the last read of an input stay as they are.

>>> from tilecraft import te, ops
>>> from tilecraft.graph import Graph
>>> A = te.placeholder((3,), name="A")
>>> rA, eA = ops.relu(A, name="rA"), ops.sigmoid(A, name="eA")
>>> head = te.compute((2,), lambda i: te.select(i < 3, rA[i], eA[i - 3]), name="head")
>>> sorted(t.name for t in Graph.from_outputs([head]).computes)
['eA', 'head', 'rA']
>>> sorted(t.name for t in eliminate_dead_code(Graph.from_outputs([head])).computes)
['head', 'rA']
"""

from __future__ import annotations

from tilecraft.graph import Graph
from tilecraft.passes.rewriting import rebuild_graph, with_body
from tilecraft.te.bounds import Interval, facts_from_condition, interval, tighten
from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Compare,
    CompareOp,
    Const,
    Expr,
    IterVar,
    Logical,
    LogicalOp,
    Not,
    Select,
    Var,
)
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import children, rebuild

Ranges = dict[IterVar | Var, Interval]


def decide(cond: Expr, ranges: Ranges) -> bool | None:
    """``True`` / ``False`` when integer condition ``cond`` has that value at every point of
    ``ranges`` (iteration variables range over their extents otherwise), else ``None``.

    >>> from tilecraft import te
    >>> i = te.reduce_axis(5, name="i")
    >>> decide(i < 5, {}), decide(i >= 5, {}), decide(i < 3, {})
    (True, False, None)
    """
    if isinstance(cond, Const):
        return bool(cond.value)
    if isinstance(cond, Not):
        inner = decide(cond.x, ranges)
        return None if inner is None else not inner
    if isinstance(cond, Logical):
        a, b = decide(cond.a, ranges), decide(cond.b, ranges)
        if cond.op is LogicalOp.AND:
            return False if False in (a, b) else (True if a is True and b is True else None)
        return True if True in (a, b) else (False if a is False and b is False else None)
    if isinstance(cond, Compare) and cond.a.dtype.is_int and cond.b.dtype.is_int:
        span = interval(Binary(BinaryOp.SUB, cond.a, cond.b), ranges)
        if span is None:
            return None
        low, high = span
        always, never = {
            CompareOp.LT: (high < 0, low >= 0), CompareOp.LE: (high <= 0, low > 0),
            CompareOp.GT: (low > 0, high <= 0), CompareOp.GE: (low >= 0, high < 0),
            CompareOp.EQ: (low == high == 0, low > 0 or high < 0),
            CompareOp.NE: (low > 0 or high < 0, low == high == 0),
        }[cond.op]
        return True if always else (False if never else None)
    return None


def prune_selects(expr: Expr, ranges: Ranges | None = None) -> Expr:
    """``expr`` with every select whose condition :func:`decide` settles replaced by the
    branch taken; a branch is pruned knowing its select's condition (or its negation)."""
    ranges = ranges or {}
    if isinstance(expr, Select):
        verdict = decide(expr.cond, ranges)
        if verdict is not None:
            return prune_selects(expr.true_value if verdict else expr.false_value, ranges)
        true_ranges = tighten(ranges, facts_from_condition(expr.cond, True))
        false_ranges = tighten(ranges, facts_from_condition(expr.cond, False))
        true_value = prune_selects(expr.true_value, true_ranges)
        false_value = prune_selects(expr.false_value, false_ranges)
        if true_value is expr.true_value and false_value is expr.false_value:
            return expr
        return Select(expr.cond, true_value, false_value)
    kids = children(expr)
    new_kids = tuple(prune_selects(kid, ranges) for kid in kids)
    if all(new is old for new, old in zip(new_kids, kids)):
        return expr
    return rebuild(expr, new_kids)


class EliminateDeadCode:
    """The pass: prune settled selects in every compute, then keep only what the outputs
    need."""

    name = "eliminate_dead_code"

    def __call__(self, graph: Graph) -> Graph:
        replacements: dict[Tensor, Tensor] = {}
        for tensor in graph.computes:
            body = prune_selects(tensor.body)
            if body is not tensor.body:
                replacements[tensor] = with_body(tensor, body)
        # a graph is rebuilt from its outputs: computes nothing reads any more are left out
        pruned = rebuild_graph(graph, replacements)
        if [t.name for t in pruned.inputs] != [t.name for t in graph.inputs]:
            # a pruned branch held the last read of an input: the graph would lose it, and its
            # callers pass it; the selects stay (found by tests/test_random_programs.py)
            return graph
        return pruned


eliminate_dead_code = EliminateDeadCode()

__all__ = ["EliminateDeadCode", "decide", "eliminate_dead_code", "prune_selects"]
