"""The gradient of one compute with respect to one tensor it reads (thesis Eq. 4.8).

For each distinct read ``In[f(x, r)]`` of the tensor in the body ``F``, the contribution to
``dIn[z]`` is the sum, over every loop point ``(x, r)`` with ``f(x, r) == z``, of
``dOut[x] * dF/dIn[f(x, r)]`` — for a ``max``/``min`` reduction only at the points where the
body equals the result; for a ``prod`` reduction times the product of the body at the other
points (:func:`product_of_others`: a second reduction that skips the point itself, exact where
factors are zero, unlike dividing the result by the factor). The points come from
:func:`~tilecraft.autodiff.solve.solve`: the loop variables become linear forms over ``z`` and
new reduce axes, the ranges conditions of a select. Reads whose contributions differ are
separate computes, added together. Where the rest of the derivative is a product of loads
(contractions: matmul, conv), the output gradient is read from a copy padded with zeros instead
of testing each point, so that a convolution's data gradient is a contraction like its forward,
which targets map to their micro-kernels; a strided read takes the scatter form instead
(:func:`_scatter_gradient`: a contraction over the variables the read does not use, then a
gather of the taps that reach each element), as a zero-dilated copy would multiply
``stride**d`` times as many zeros.

This is the building block of a graph-level backward: it takes the output's gradient as a
tensor and returns the input's gradient as a tensor, reading the forward tensors it needs.

>>> from tilecraft import te
>>> X = te.placeholder((6,), name="X")
>>> Y = te.compute((3,), lambda i: X[2 * i] * X[2 * i], name="Y")
>>> dY = te.placeholder((3,), name="dY")
>>> print(compute_gradient(Y, dY, X).statement())
dX[i] = select(((i % 2) == 0), (dY[(i // 2)] * (X[(2 * (i // 2))] + X[(2 * (i // 2))])), 0.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tilecraft.autodiff.derivative import derivative, hoist_guards
from tilecraft.autodiff.indices import Clamp, IndexSystem
from tilecraft.autodiff.linexpr import LinExpr
from tilecraft.autodiff.solve import Solution, solve
from tilecraft.errors import AutodiffError
from tilecraft.ops.building import named_compute
from tilecraft.te.bounds import (
    Affine,
    facts_from_condition,
    index_in_bounds,
    interval,
    prove_nonnegative,
)
from tilecraft.te.expr import (
    AxisKind,
    Binary,
    BinaryOp,
    Cast,
    Compare,
    CompareOp,
    Const,
    Expr,
    IterVar,
    Load,
    Reduce,
    ReduceOp,
    Select,
    Unary,
    UnaryOp,
    const,
)
from tilecraft.te.functions import all_of
from tilecraft.te.functions import sum as te_sum
from tilecraft.te.tensor import ComputeOp, Tensor, compute
from tilecraft.te.visit import children, rebuild, substitute, transform, walk


def reads_of(body: Expr, tensor: Tensor) -> list[Load]:
    """The distinct reads of ``tensor`` in ``body``, in order of first occurrence."""
    seen: dict[Load, None] = {}
    for node in walk(body):
        if isinstance(node, Load) and node.tensor is tensor:
            seen.setdefault(node, None)
    return list(seen)


def check_differentiable(out: Tensor, wrt: Tensor) -> None:
    if not isinstance(out.op, ComputeOp):
        raise AutodiffError(f"{out.name} is not a compute; only computes have gradients")
    for tensor, role in ((out, "compute"), (wrt, "input")):
        if not tensor.dtype.is_float:
            raise AutodiffError(
                f"the {role} {tensor.name} has the integer type {tensor.dtype.value}, which has "
                f"no gradient (needed for d{out.name}/d{wrt.name}); differentiate with respect "
                "to floating-point tensors, through floating-point computes")


def compute_gradient(out: Tensor, grad_out: Tensor, wrt: Tensor,
                     name: str | None = None) -> Tensor | None:
    """``d(loss)/d(wrt)`` through the compute ``out`` alone, given ``grad_out`` (the
    gradient of ``out``, of its shape); ``None`` when ``out``'s value does not depend on
    ``wrt`` (it is only read in conditions, or not at all)."""
    check_differentiable(out, wrt)
    if grad_out.shape != out.shape:
        raise AutodiffError(f"the gradient of {out.name} must have its shape {out.shape}, got "
                            f"{grad_out.name} of shape {grad_out.shape}")
    name = name or f"d{wrt.name}"
    body = out.op.body  # type: ignore[union-attr]
    inner = body.body if isinstance(body, Reduce) else body
    others: Expr | None = None
    if isinstance(body, Reduce) and body.op is ReduceOp.PROD:
        # d/dx_i prod_j x_j = prod_{j != i} x_j
        others = Load(product_of_others(out, body), tuple(out.axes) + body.axes)
        inner_grad_scale: Expr | None = None
    elif isinstance(body, Reduce) and body.op is not ReduceOp.SUM:
        # the reduction's derivative: 1 where the body reached the result (on ties every
        # maximal element gets the gradient; PyTorch picks one)
        inner_grad_scale = Compare(CompareOp.EQ, inner, Load(out, out.axes))
    else:
        inner_grad_scale = None
    reads = []
    for load in reads_of(inner, wrt):
        partial = derivative(inner, load, out.name)
        if partial is not None:
            reads.append((load, partial))
    if not reads:
        return None
    pieces = []
    for index, (load, partial) in enumerate(reads):
        value: Expr = Binary(BinaryOp.MUL, Load(grad_out, out.axes), partial)
        if others is not None:
            value = Binary(BinaryOp.MUL, value, others)
        if inner_grad_scale is not None:
            value = Select(inner_grad_scale, value, Const(0.0, value.dtype))
        piece_name = name if len(reads) == 1 else f"{name}_read{index}"
        paddable = inner_grad_scale is None and others is None and _finite_product(partial)
        scattered = _scatter_gradient(out, load, value, wrt, grad_out, piece_name) \
            if paddable else None
        pieces.append(scattered if scattered is not None else _read_gradient(
            out, load, value, wrt, piece_name, grad_out if paddable else None))
    return add_all(pieces, name)


def product_of_others(out: Tensor, body: Reduce) -> Tensor:
    """``others[x, r] = prod over r' != r of body(x, r')`` for the product reduction ``body`` of
    ``out``: one element per loop point, the factor each point's derivative is scaled by (1
    where the reduction has a single point).

    >>> from tilecraft import te
    >>> X = te.placeholder((2, 3), name="X")
    >>> r = te.reduce_axis(3, name="r")
    >>> P = te.compute((2,), lambda i: te.prod(X[i, r], axis=r), name="P")
    >>> print(product_of_others(P, P.op.body).statement())
    P_others[i, r] = prod(select((r_other == r), 1.0, X[i, r_other]), axis=[r_other])
    """
    spatial = tuple(out.axes)

    def others(*point: IterVar) -> Expr:
        at, skipped = point[:len(spatial)], point[len(spatial):]
        fresh = tuple(IterVar(f"{axis.name}_other", axis.extent, AxisKind.REDUCE)
                      for axis in body.axes)
        mapping: dict[IterVar, Expr] = {**dict(zip(spatial, at)), **dict(zip(body.axes, fresh))}
        itself = all_of(*(Compare(CompareOp.EQ, f, s) for f, s in zip(fresh, skipped)))
        factor = Select(itself, const(1.0, body.dtype), substitute(body.body, mapping))
        return Reduce(ReduceOp.PROD, factor, fresh)

    shape = tuple(out.shape) + tuple(axis.extent for axis in body.axes)
    names = [axis.name for axis in spatial] + [axis.name for axis in body.axes]
    return named_compute(shape, names, others, f"{out.name}_others")


def add_all(tensors: Sequence[Tensor], name: str) -> Tensor:
    """The elementwise sum of tensors of one shape."""
    if len(tensors) == 1:
        return tensors[0]

    def total(*z: IterVar) -> Expr:
        result: Expr = Load(tensors[0], tuple(z))
        for tensor in tensors[1:]:
            result = Binary(BinaryOp.ADD, result, Load(tensor, tuple(z)))
        return result

    return compute(tensors[0].shape, total, name=name)


def _read_gradient(out: Tensor, load: Load, value: Expr, wrt: Tensor, name: str,
                   paddable: Tensor | None) -> Tensor:
    """The contribution of one read. With ``paddable`` (the output's gradient, when the rest
    of the product is finite wherever it is read), the ranges of the output's axes — and the
    exact divisions of a strided read — are not tested but read from a copy of that gradient
    padded with zeros and dilated by the stride (:class:`_Spread`): a convolution's data
    gradient is then a plain contraction, like the forward."""
    guards, value = hoist_guards(value)
    system = IndexSystem.of(out, load)
    facts = [f for g in guards for f in facts_from_condition(g)]
    for clamp in system.clamps:
        _prove_clamp(out, load, clamp, facts)
    loop_vars = list(out.axes) + list(out.reduce_axes)
    dilate = paddable is not None
    spread = _spread_gradient(out, system, wrt, paddable, name) if paddable is not None else None
    if spread is not None:
        target = Load(paddable, out.axes)  # type: ignore[arg-type]
        marker = Load(spread.tensor, out.axes)
        value = transform(value, lambda node: marker if node == target else None)

    def body(*z: IterVar) -> Expr:
        solution = solve(system, z, dilate=dilate)
        mapping = {v: solution.values[v].to_expr() for v in loop_vars}
        dropped: list[Expr] = []
        result = substitute(value, mapping)
        if spread is not None:
            indices, dropped = spread.indices(solution, out.axes)
            result = transform(result, lambda node: Load(spread.tensor, indices)
                               if isinstance(node, Load) and node.tensor is spread.tensor
                               else None)
        ranges = [c for c in solution.conditions if not any(c is d for d in dropped)]
        guarded = [c for c in (substitute(g, mapping) for g in guards) if not _always(c)]
        range_facts = [f for c in ranges for f in facts_from_condition(c)]
        if guarded:
            guard = _clamp_loads(all_of(*guarded), range_facts)
            inner_facts = range_facts + [f for g in guarded for f in facts_from_condition(g)]
            result = Select(guard, _clamp_loads(result, inner_facts), const(0.0, result.dtype))
        else:
            result = _clamp_loads(result, range_facts)
        if ranges:
            result = Select(all_of(*ranges), result, const(0.0, result.dtype))
        if solution.reduce_axes:
            return te_sum(result, axis=solution.reduce_axes)
        return result

    return compute(wrt.shape, body, name=name)


def _scatter_gradient(out: Tensor, load: Load, value: Expr, wrt: Tensor, grad_out: Tensor,
                      name: str) -> Tensor | None:
    """A strided contraction read's gradient in scatter form (the transposed convolution as a
    matrix product and a col2im gather), or ``None`` where it does not apply.

    The loop variables the read's indices use (``V_A``: a conv's n, c, h, w and taps) and the
    others (``V_r``: its output channel) split the work: ``cols[V_A] = sum_{V_r} value`` is a
    contraction over ``V_r`` only, and the gradient is the gradient of the gather
    ``G[V_A] = wrt[f(V_A)]`` given ``cols`` (solved like any read: each point sums the
    ``ceil(K / s)`` taps that reach it, the exact divisions as conditions). The spread form
    would multiply ``s**d`` times as many zeros. It applies where a spatial axis of ``out`` is
    read with a stride (a coefficient > 1), the read is affine (no floordiv/mod) and some loop
    variable is not in the read."""
    system = IndexSystem.of(out, load)
    if system.pairs or system.clamps:
        return None
    loops = list(out.axes) + list(out.reduce_axes)
    used = {term for form, _ in system.rows for term, _ in form.terms}
    strided = any(abs(coef) > 1 and term in out.axes
                  for form, _ in system.rows for term, coef in form.terms)
    rest = [v for v in loops if v not in used]
    if not strided or not rest or not all(v in loops for v in used):
        return None
    by_other = {v for n in walk(value) if isinstance(n, Load)
                and n.tensor is not wrt and n.tensor is not grad_out
                for i in n.indices for v in walk(i) if isinstance(v, IterVar)}
    kept = [v for v in loops if v in used]
    # the axes the other operand reads first (a conv: c, taps), then the rest (n, h, w): the
    # matrix product's rows, then its columns
    kept.sort(key=lambda v: (v not in by_other, loops.index(v)))
    sums = [IterVar(f"r_{v.name}", v.extent, AxisKind.REDUCE) for v in rest]

    def cols_body(*axes: IterVar) -> Expr:
        mapping: dict = dict(zip(kept, axes))
        mapping.update(zip(rest, sums))
        return te_sum(substitute(value, mapping), axis=sums)

    cols = compute(tuple(v.extent for v in kept), cols_body, name=f"{name}_cols")

    def gather_body(*axes: IterVar) -> Expr:
        return substitute(load, dict(zip(kept, axes)))

    gather = compute(cols.shape, gather_body, name=f"{name}_gather")
    (gather_load,) = reads_of(gather.op.body, wrt)  # type: ignore[union-attr]
    return _read_gradient(gather, gather_load, Load(cols, gather.axes), wrt, name, None)


@dataclass(frozen=True)
class _AxisSpread:
    """Along one axis of the output gradient: position ``p`` of the spread copy holds
    ``grad[(p + base) / step]`` when that is an exact division inside the gradient, else 0."""

    base: int
    step: int


@dataclass(frozen=True)
class _Spread:
    tensor: Tensor
    axes: tuple[_AxisSpread | None, ...]

    def indices(self, solution: Solution, out_axes: Sequence[IterVar]
                ) -> tuple[tuple[Expr, ...], list[Expr]]:
        """The spread copy's indices at a solution, and the conditions it makes redundant."""
        indices: list[Expr] = []
        dropped: list[Expr] = []
        for axis, spec in zip(out_axes, self.axes):
            value = solution.values[axis]
            if spec is None:
                indices.append(value.to_expr())
                continue
            position, division = _spread_position(solution, value)
            assert division is None or division[1] == spec.step
            if division is not None:
                dropped.append(division[2])
            dropped.extend(solution.range_conditions.get(axis, []))
            indices.append((position - spec.base).to_expr())
        return tuple(indices), dropped


def _spread_position(solution: Solution, value: LinExpr
                     ) -> tuple[LinExpr, tuple[LinExpr, int, Expr] | None]:
    """``value`` times the step of its dilated division, as an affine form: ``num // c + L``
    is ``(num + c*L) / c`` where the division is exact."""
    divided = [(term, coef) for term, coef in value.terms if term in solution.divisions]
    if len(divided) != 1 or divided[0][1] != 1:
        return value, None
    term = divided[0][0]
    numerator, step, exact = solution.divisions[term]
    rest = value - LinExpr.of(term)
    return numerator + rest * step, (numerator, step, exact)


def _spread_gradient(out: Tensor, system: IndexSystem, wrt: Tensor, grad_out: Tensor,
                     name: str) -> _Spread | None:
    """The output gradient padded with zeros (so that every point the solution visits is
    inside it) and dilated by the steps of exact divisions, from a probe solve over the
    gradient's axes; ``None`` where nothing needs it."""
    probe = tuple(IterVar(f"z{d}", extent, AxisKind.SPATIAL)
                  for d, extent in enumerate(wrt.shape))
    solution = solve(system, probe, dilate=True)
    if not solution.reduce_axes:  # no loop to keep free of tests: a select is cheaper
        return None
    specs: list[_AxisSpread | None] = []
    shape: list[int] = []
    for axis, extent in zip(out.axes, out.shape):
        position, division = _spread_position(solution, solution.values[axis])
        rng = position.interval()
        if rng is None or (division is None and axis not in solution.range_conditions) \
                or (division is not None and any(isinstance(t, Binary) and t.op in (
                    BinaryOp.FLOORDIV, BinaryOp.MOD) for t, _ in position.terms)):
            specs.append(None)
            shape.append(extent)
            continue
        specs.append(_AxisSpread(rng[0], division[1] if division else 1))
        shape.append(rng[1] - rng[0] + 1)
    if all(spec is None for spec in specs):
        return None

    def spread(*p: IterVar) -> Expr:
        conds: list[Expr] = []
        indices: list[Expr] = []
        for position, spec, extent in zip(p, specs, out.shape):
            if spec is None:
                indices.append(position)
                continue
            true = LinExpr.of(position) + spec.base
            index = true.floordiv(spec.step)
            if spec.step > 1:
                conds.append(Compare(CompareOp.EQ, Binary(BinaryOp.MOD, true.to_expr(),
                                                           const(spec.step)), const(0)))
            conds += [Compare(CompareOp.GE, index.to_expr(), const(0)),
                      Compare(CompareOp.LE, index.to_expr(), const(extent - 1))]
            indices.append(index.to_expr())
        conds = [c for c in conds if not _always(c)]
        read: Expr = Load(grad_out, tuple(indices))
        if not conds:
            return read
        facts = [f for c in conds for f in facts_from_condition(c)]
        return Select(all_of(*conds), _clamp_loads(read, facts), const(0.0, grad_out.dtype))

    tensor = compute(tuple(shape), spread, name=f"{name}_spread_{grad_out.name}")
    return _Spread(tensor, tuple(specs))


def _finite_product(expr: Expr) -> bool:
    """Built from loads and constants by +, -, * and guards only: finite wherever its loads
    are, so a zero from the padding cancels it."""
    for node in walk(expr):
        if not node.dtype.is_float:
            continue
        if isinstance(node, Binary) and node.op not in (BinaryOp.ADD, BinaryOp.SUB,
                                                        BinaryOp.MUL):
            return False
        if isinstance(node, Unary) and node.op is not UnaryOp.NEG:
            return False
        if not isinstance(node, (Binary, Unary, Load, Const, Cast, Select)):
            return False
    return True


def _always(cond: Expr) -> bool:
    """True when an integer comparison holds for every value of its variables (a guard of the
    forward that the gradient's indices satisfy by construction, e.g. ``z + 1 >= 1``)."""
    if not (isinstance(cond, Compare) and cond.a.dtype.is_int):
        return False
    difference = interval(Binary(BinaryOp.SUB, cond.a, cond.b))
    if difference is None:
        return False
    low, high = difference
    return {CompareOp.LT: high < 0, CompareOp.LE: high <= 0, CompareOp.GT: low > 0,
            CompareOp.GE: low >= 0, CompareOp.EQ: low == high == 0,
            CompareOp.NE: low > 0 or high < 0}[cond.op]


def _prove_clamp(out: Tensor, load: Load, clamp: Clamp, facts: list[Affine]) -> None:
    """A clamped index is the identity wherever the read's guards hold (else the read's
    gradient would also reach the clamped boundary element, which the solver ignores)."""
    if _at_least(clamp.value, clamp.low, facts) and _at_most(clamp.value, clamp.high, facts):
        return
    raise AutodiffError(
        f"compute {out.name}: the clamp of {clamp.value} to [{clamp.low}, {clamp.high}] in "
        f"{load} is not implied by the select guarding it; its gradient is outside the "
        "solvable class — guard the read with the range of the clamped index")


def _at_least(expr: Expr, low: int, facts: list[Affine]) -> bool:
    if isinstance(expr, Binary) and expr.op is BinaryOp.FLOORDIV and isinstance(expr.b, Const):
        return _at_least(expr.a, low * int(expr.b.value), facts)
    return prove_nonnegative(Binary(BinaryOp.SUB, expr, Const(low, expr.dtype)), None, facts)


def _at_most(expr: Expr, high: int, facts: list[Affine]) -> bool:
    if isinstance(expr, Binary) and expr.op is BinaryOp.FLOORDIV and isinstance(expr.b, Const):
        divisor = int(expr.b.value)
        return _at_most(expr.a, high * divisor + divisor - 1, facts)
    return prove_nonnegative(Binary(BinaryOp.SUB, Const(high, expr.dtype), expr), None, facts)


def _clamp_loads(expr: Expr, facts: list[Affine]) -> Expr:
    """Clamp every load index not provably inside its tensor under ``facts`` (the select
    around it discards such values; the clamp keeps the read itself in bounds)."""
    if isinstance(expr, Select):
        cond = _clamp_loads(expr.cond, facts)
        t = _clamp_loads(expr.true_value, facts + facts_from_condition(expr.cond, True))
        f = _clamp_loads(expr.false_value, facts + facts_from_condition(expr.cond, False))
        return Select(cond, t, f)
    kids = children(expr)
    if not kids:
        return expr
    new_kids = tuple(_clamp_loads(kid, facts) for kid in kids)
    if isinstance(expr, Load):
        new_kids = tuple(
            index if index_in_bounds(index, extent, None, facts) else _clamp(index, extent)
            for index, extent in zip(new_kids, expr.tensor.shape))
    return rebuild(expr, new_kids)


def _clamp(index: Expr, extent: int) -> Expr:
    upper = Binary(BinaryOp.MIN, index, Const(extent - 1, index.dtype))
    return Binary(BinaryOp.MAX, upper, Const(0, index.dtype))
