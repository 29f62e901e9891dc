"""The real-valued relaxation of Eq. 3.14: minimise DV subject to MU <= capacity over real
tile sizes in boxes ``[lower, upper]``.

DV and every operator's MU are sums of monomials ``c * prod T_i ** e_i`` (trip counts relaxed
to ``X / T``). In log space ``y = log T`` a sum of monomials with positive coefficients is
convex (a geometric program), so a log-barrier interior-point method with Newton steps finds
the optimum the thesis obtains with Lagrange multipliers (Eq. 3.18 for the GEMM chain). Terms
with negative coefficients (halo overlaps) make it only nearly convex; the Newton system is
regularised where the Hessian is not positive definite. numpy only.

>>> import numpy as np
>>> # minimise 1/x + 1/y  s.t.  x*y + x + y <= 15 over [1, 100]^2: x = y = 3
>>> objective = Monomials(np.array([1.0, 1.0]), np.array([[-1.0, 0.0], [0.0, -1.0]]))
>>> usage = Monomials(np.array([1.0, 1.0, 1.0]), np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]]))
>>> result = minimize(objective, [usage], 15.0, np.array([1.0, 1.0]), np.array([100.0, 100.0]))
>>> np.round(result.tiles, 4).tolist(), result.feasible
([3.0, 3.0], True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Monomials:
    """``sum_j coefficients[j] * prod_i T_i ** exponents[j, i]``."""

    coefficients: np.ndarray
    exponents: np.ndarray

    def value(self, y: np.ndarray) -> float:
        """The value at ``y = log T`` (``inf`` where it overflows)."""
        if not len(self.coefficients):
            return 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            total = float(np.dot(self.coefficients, np.exp(self.exponents @ y)))
        return total if np.isfinite(total) else float("inf")

    def derivatives(self, y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """Value, gradient and Hessian with respect to ``y = log T``."""
        dims = len(y)
        if not len(self.coefficients):
            return 0.0, np.zeros(dims), np.zeros((dims, dims))
        weights = self.coefficients * np.exp(self.exponents @ y)
        gradient = self.exponents.T @ weights
        hessian = (self.exponents.T * weights) @ self.exponents
        return float(weights.sum()), gradient, hessian


@dataclass(frozen=True)
class RelaxedResult:
    tiles: np.ndarray
    objective: float
    feasible: bool
    iterations: int


_GROWTH = 0.25  # Armijo constant


def minimize(objective: Monomials, usages: Sequence[Monomials], capacity: float,
             lower: np.ndarray, upper: np.ndarray) -> RelaxedResult:
    """Minimise ``objective(T)`` subject to ``usage(T) <= capacity`` for every usage and
    ``lower <= T <= upper``. Infeasible when even ``lower`` exceeds the capacity."""
    lower = np.asarray(lower, dtype=float)
    upper = np.asarray(upper, dtype=float)
    lo, hi = np.log(lower), np.log(upper)

    def worst_usage(y: np.ndarray) -> float:
        return max((u.value(y) for u in usages), default=0.0)

    if worst_usage(lo) > capacity * (1 + 1e-12):
        return RelaxedResult(lower, objective.value(lo), False, 0)
    free = hi - lo > 1e-12
    if not free.any():
        return RelaxedResult(lower, objective.value(lo), True, 0)
    # strictly feasible start on the diagonal of the box
    fraction = 0.5
    start = lo + fraction * (hi - lo)
    while worst_usage(start) >= capacity * (1 - 1e-9) and fraction > 1e-12:
        fraction *= 0.5
        start = lo + fraction * (hi - lo)
    if fraction <= 1e-12:
        return RelaxedResult(lower, objective.value(lo), True, 0)
    y = start
    weight = 1.0
    iterations = 0
    index = np.flatnonzero(free)

    def barrier(point: np.ndarray, weight: float) -> float | None:
        slack = [capacity - u.value(point) for u in usages]
        if not np.isfinite(slack).all():
            return None
        inside = point[index] - lo[index]
        room = hi[index] - point[index]
        if min(slack, default=1.0) <= 0 or inside.min() <= 0 or room.min() <= 0:
            return None
        value = objective.value(point)
        if not 0 < value < float("inf"):
            return None
        total = -sum(np.log(s / capacity) for s in slack)
        total -= np.log(inside).sum() + np.log(room).sum()
        return float(np.log(value) + weight * total)

    while True:
        for _ in range(60):
            iterations += 1
            gradient, hessian = _newton_system(objective, usages, capacity, y, lo, hi, index,
                                               weight)
            step = _regularised_step(gradient, hessian)
            decrement = -float(gradient @ step)
            if decrement < 1e-12:
                break
            current = barrier(y, weight)
            scale = 1.0
            while scale > 1e-12:
                candidate = y.copy()
                candidate[index] += scale * step
                value = barrier(candidate, weight)
                if value is not None and current is not None and \
                        value <= current - _GROWTH * scale * decrement:
                    break
                scale *= 0.5
            if scale <= 1e-12:
                break
            y = candidate
            if decrement < 1e-10:
                break
        if weight < 1e-9:
            break
        weight *= 0.1
    return RelaxedResult(np.exp(y), objective.value(y), True, iterations)


def _newton_system(objective: Monomials, usages: Sequence[Monomials], capacity: float,
                   y: np.ndarray, lo: np.ndarray, hi: np.ndarray, index: np.ndarray,
                   weight: float) -> tuple[np.ndarray, np.ndarray]:
    value, grad_f, hess_f = objective.derivatives(y)
    gradient = grad_f / value
    hessian = hess_f / value - np.outer(gradient, gradient)
    for usage in usages:
        used, grad_u, hess_u = usage.derivatives(y)
        slack = capacity - used
        g = grad_u / slack
        gradient = gradient + weight * g
        hessian = hessian + weight * (hess_u / slack + np.outer(g, g))
    gradient = gradient[index]
    hessian = hessian[np.ix_(index, index)]
    inside = y[index] - lo[index]
    room = hi[index] - y[index]
    gradient = gradient + weight * (-1.0 / inside + 1.0 / room)
    hessian = hessian + weight * np.diag(1.0 / inside ** 2 + 1.0 / room ** 2)
    return gradient, hessian


def _regularised_step(gradient: np.ndarray, hessian: np.ndarray) -> np.ndarray:
    values, vectors = np.linalg.eigh(hessian)
    floor = 1e-9 * max(1.0, float(np.abs(values).max()))
    values = np.maximum(values, floor)
    return -(vectors @ ((vectors.T @ gradient) / values))
