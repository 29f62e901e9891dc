"""Integer index expressions and conditions of Kernel IR evaluated on numpy arrays of loop
variable values: the model's way of seeing which addresses the 32 lanes of a warp touch and
how often a guard holds.

:func:`evaluate` takes an environment of variables to arrays (broadcast together) and returns
the values, or raises :class:`NotEvaluable` for anything but integer arithmetic on loop
variables (a load inside an index, a float): the caller then falls back to an assumption.
:func:`guard_fraction` is the fraction of the loop iterations where all the conditions hold,
over a grid of at most :data:`MAX_POINTS` sampled points of the variables they use.

>>> from tilecraft.te import Var, const
>>> from tilecraft.te.expr import Compare, CompareOp
>>> import numpy as np
>>> t = Var("t")
>>> evaluate((t // 2) * 8 + t % 2, {t: np.arange(4)}).tolist()
[0, 1, 8, 9]
>>> guard_fraction((Compare(CompareOp.LT, t, const(16)),), {t: 64})
0.25
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Cast,
    Compare,
    CompareOp,
    Const,
    Expr,
    Logical,
    LogicalOp,
    Not,
    Select,
    Var,
)

__all__ = ["MAX_POINTS", "NotEvaluable", "evaluate", "free_vars", "guard_fraction", "lane_grid"]

#: the most points a guard is evaluated on (per variable: all values up to 64, else 64 spread)
MAX_POINTS = 1 << 14
_SAMPLES_PER_VAR = 64


class NotEvaluable(Exception):
    """The expression is not integer arithmetic on loop variables."""


_BINARY = {
    BinaryOp.ADD: np.add, BinaryOp.SUB: np.subtract, BinaryOp.MUL: np.multiply,
    BinaryOp.FLOORDIV: np.floor_divide, BinaryOp.MOD: np.mod,
    BinaryOp.MAX: np.maximum, BinaryOp.MIN: np.minimum,
    BinaryOp.BITWISE_AND: np.bitwise_and, BinaryOp.BITWISE_OR: np.bitwise_or,
    BinaryOp.BITWISE_XOR: np.bitwise_xor,
}
_COMPARE = {
    CompareOp.LT: np.less, CompareOp.LE: np.less_equal, CompareOp.GT: np.greater,
    CompareOp.GE: np.greater_equal, CompareOp.EQ: np.equal, CompareOp.NE: np.not_equal,
}


def evaluate(expr: Expr, env: Mapping[Var, np.ndarray]) -> np.ndarray:
    """The values of ``expr`` with the variables of ``env`` (others are 0: the model's
    representative iteration)."""
    if isinstance(expr, Const):
        if isinstance(expr.value, float) and not float(expr.value).is_integer():
            raise NotEvaluable(expr)
        return np.asarray(int(expr.value), dtype=np.int64)
    if isinstance(expr, Var):
        return np.asarray(env.get(expr, 0), dtype=np.int64)
    if isinstance(expr, Binary):
        function = _BINARY.get(expr.op)
        if function is None:
            raise NotEvaluable(expr)
        a, b = evaluate(expr.a, env), evaluate(expr.b, env)
        if expr.op in (BinaryOp.FLOORDIV, BinaryOp.MOD):
            b = np.where(b == 0, 1, b)
        return function(a, b)
    if isinstance(expr, Compare):
        return _COMPARE[expr.op](evaluate(expr.a, env), evaluate(expr.b, env))
    if isinstance(expr, Logical):
        a, b = evaluate(expr.a, env), evaluate(expr.b, env)
        return np.logical_and(a, b) if expr.op is LogicalOp.AND else np.logical_or(a, b)
    if isinstance(expr, Not):
        return np.logical_not(evaluate(expr.x, env))
    if isinstance(expr, Select):
        return np.where(evaluate(expr.cond, env), evaluate(expr.true_value, env),
                        evaluate(expr.false_value, env))
    if isinstance(expr, Cast) and not expr.to.is_float:
        return evaluate(expr.x, env)
    raise NotEvaluable(expr)


def free_vars(expr: Expr) -> set[Var]:
    """The loop variables ``expr`` uses."""
    from tilecraft.kernel_ir.nodes import walk_expr

    return {node for node in walk_expr(expr) if isinstance(node, Var)}


def _samples(extent: int, count: int) -> np.ndarray:
    if extent <= count:
        return np.arange(extent)
    return np.unique(np.linspace(0, extent - 1, count).round().astype(np.int64))


def guard_fraction(conditions: Sequence[Expr], extents: Mapping[Var, int]) -> float:
    """The fraction of the iterations of the loops in ``extents`` for which every condition
    holds (sampled, see the module); 1.0 when a condition cannot be evaluated."""
    if not conditions:
        return 1.0
    used = sorted(set().union(*(free_vars(c) for c in conditions)) & set(extents),
                  key=lambda v: v.name)
    per_var = _SAMPLES_PER_VAR
    while used and per_var > 2 and per_var ** len(used) > MAX_POINTS:
        per_var //= 2
    axes = [_samples(extents[v], per_var) for v in used]
    if used and np.prod([len(a) for a in axes], dtype=float) > MAX_POINTS:
        axes = [a[:: max(1, len(a) // 2)] for a in axes]
    grids = np.meshgrid(*axes, indexing="ij") if used else []
    env = {v: g.ravel() for v, g in zip(used, grids, strict=True)}
    try:
        holds = np.ones(max((g.size for g in grids), default=1), dtype=bool)
        for condition in conditions:
            holds &= np.broadcast_to(evaluate(condition, env).astype(bool), holds.shape)
    except NotEvaluable:
        return 1.0
    return float(holds.mean())


def lane_grid(extents: Sequence[tuple[Var, int]], lanes: int) -> dict[Var, np.ndarray]:
    """Values of the thread variables (``(var, extent)``, fastest first) for the first
    ``lanes`` linear thread ids of a block: lane ``l`` has ``var0 = l % e0``,
    ``var1 = l // e0 % e1`` ..."""
    ids = np.arange(lanes)
    env: dict[Var, np.ndarray] = {}
    for var, extent in extents:
        env[var] = ids % max(extent, 1)
        ids = ids // max(extent, 1)
    return env

