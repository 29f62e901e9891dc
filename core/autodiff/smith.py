"""Smith normal form of integer matrices, with its unimodular transforms (thesis §4.6.1).

``U @ A @ V == D`` with ``U`` and ``V`` unimodular (integer, determinant ±1) and ``D``
diagonal, each diagonal entry dividing the next. Solving ``A u = b`` over the integers is then
``D y = U b`` (entry by entry) and ``u = V y``; the columns of ``V`` past the rank span the
integer kernel of ``A``.

>>> form = smith_normal_form([[2, 4], [6, 8]])
>>> form.diagonal, form.rank
([2, 4], 2)
>>> multiply(multiply(form.left, [[2, 4], [6, 8]]), form.right) == form.diagonal_matrix
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Matrix = list[list[int]]


def identity(size: int) -> Matrix:
    return [[int(i == j) for j in range(size)] for i in range(size)]


def multiply(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> Matrix:
    """The integer matrix product ``a @ b``."""
    inner = len(b)
    cols = len(b[0]) if b else 0
    return [[sum(row[k] * b[k][j] for k in range(inner)) for j in range(cols)] for row in a]


@dataclass(frozen=True)
class SmithForm:
    """``left @ A @ right == diagonal_matrix``; ``diagonal`` has min(m, n) entries, the
    first ``rank`` of them positive."""

    left: Matrix
    diagonal_matrix: Matrix
    right: Matrix

    @property
    def diagonal(self) -> list[int]:
        size = min(len(self.diagonal_matrix), len(self.right))
        return [self.diagonal_matrix[i][i] for i in range(size)]

    @property
    def rank(self) -> int:
        return sum(1 for d in self.diagonal if d != 0)


def smith_normal_form(matrix: Sequence[Sequence[int]], columns: int | None = None) -> SmithForm:
    """The Smith normal form of an ``m x n`` integer matrix (``columns`` gives ``n`` when
    ``m == 0``)."""
    d = [[int(x) for x in row] for row in matrix]
    m = len(d)
    n = len(d[0]) if m else (columns or 0)
    left, right = identity(m), identity(n)

    def swap_rows(i: int, j: int) -> None:
        d[i], d[j] = d[j], d[i]
        left[i], left[j] = left[j], left[i]

    def swap_cols(i: int, j: int) -> None:
        for mat in (d, right):
            for row in mat:
                row[i], row[j] = row[j], row[i]

    def add_row(target: int, source: int, factor: int) -> None:  # row_t += factor * row_s
        for mat in (d, left):
            mat[target] = [a + factor * b for a, b in zip(mat[target], mat[source])]

    def add_col(target: int, source: int, factor: int) -> None:
        for mat in (d, right):
            for row in mat:
                row[target] += factor * row[source]

    for t in range(min(m, n)):
        while True:
            entries = [(abs(d[i][j]), i, j) for i in range(t, m) for j in range(t, n)
                       if d[i][j] != 0]
            if not entries:
                break
            _, i, j = min(entries)
            swap_rows(t, i)
            swap_cols(t, j)
            pivot = d[t][t]
            clean = True
            for i in range(t + 1, m):
                add_row(i, t, -(d[i][t] // pivot))
                clean &= d[i][t] == 0
            for j in range(t + 1, n):
                add_col(j, t, -(d[t][j] // pivot))
                clean &= d[t][j] == 0
            if not clean:
                continue
            offender = next((i for i in range(t + 1, m) for j in range(t + 1, n)
                             if d[i][j] % pivot != 0), None)
            if offender is None:
                break
            add_row(t, offender, 1)  # brings a non-multiple into row t; reduce again
        if t < m and d[t][t] < 0:
            d[t] = [-x for x in d[t]]
            left[t] = [-x for x in left[t]]
    return SmithForm(left, d, right)


def column_echelon(matrix: Sequence[Sequence[int]]) -> Matrix:
    """A basis of the integer lattice spanned by the columns of ``matrix``, in column echelon
    form: column ``c``'s first nonzero row (its pivot) comes strictly after column ``c-1``'s,
    so the row of a pivot involves no later column. Only unimodular column operations are
    used, so the lattice is unchanged; zero columns are dropped.

    >>> column_echelon([[2, 3], [1, 0]])
    [[1, 0], [-1, 3]]
    """
    cols = [list(col) for col in zip(*matrix)] if matrix else []
    rows = len(matrix)
    result: list[list[int]] = []
    for r in range(rows):
        live = [c for c in cols if c[r] != 0]
        if not live:
            continue
        rest = [c for c in cols if c[r] == 0]
        while len(live) > 1:  # Euclid on the entries of row r
            live.sort(key=lambda c: abs(c[r]))
            head = live[0]
            reduced = [head]
            for c in live[1:]:
                q = c[r] // head[r]
                c = [a - q * b for a, b in zip(c, head)]
                (reduced if c[r] != 0 else rest).append(c)
            live = reduced
        result.append(live[0])
        cols = rest
    return [list(row) for row in zip(*result)] if result else [[] for _ in range(rows)]
