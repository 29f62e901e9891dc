"""What the AscendC code generator recognises in Kernel IR loop nests, so that a nest becomes
one AscendC call instead of a scalar loop:

- :func:`match_row` — an innermost loop moving a contiguous run of elements between two
  buffers (``dst[.., v] = src[.., v]``, perhaps guarded by ``base + v < bound``): a
  ``DataCopyPad`` of ``min(extent, bound - base)`` elements;
- :func:`match_vector` — an innermost loop computing ``dst[.., v] = f(a[.., v], b[.., v])``
  or ``f(a[.., v], c)`` with a vector unit operation ``f`` on contiguous, 32-byte aligned runs;
- :func:`match_reduction` — ``acc[..] op= x[.., v]`` over an innermost loop: ``ReduceSum`` /
  ``ReduceMax`` / ``ReduceMin`` into a scratch element, then one scalar combining step;
- :func:`match_contraction` — the Cube's tile: loops ``i, j, k`` (guards allowed) around
  ``C[i, j] sum= A[i, k] * B[k, j]`` with ``C`` in L0C, ``A`` in L0A, ``B`` in L0B: one ``Mmad``;
- :func:`nest_store` — the one store at the bottom of a perfect nest (for fills and copies).

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Buffer, BufferLoad, For, LoopKind, Store
>>> from tilecraft.te import Var, const
>>> a, b = Buffer("a", (4, 24), DType.FLOAT32, level="UB"), Buffer("b", (96,), DType.FLOAT32)
>>> i, v = Var("i"), Var("v")
>>> row = match_row(For(v, const(24), LoopKind.SERIAL,
...                     Store(a, (i, v), BufferLoad(b, (i * 24 + v,)))))
>>> str(row.dst_offset), str(row.src_offset), row.extent
('(i * 24)', '(i * 24)', 24)
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.codegen.affine import linear_form
from tilecraft.codegen.c_expressions import flat_index
from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import (
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    Stmt,
    Store,
    walk_expr,
)
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Cast,
    Compare,
    CompareOp,
    Const,
    Expr,
    ReduceOp,
    Unary,
    UnaryOp,
    Var,
    const,
)
from tilecraft.te.visit import substitute

__all__ = ["Contraction", "Reduction", "Row", "VectorOp", "match_contraction", "match_reduction",
           "match_row", "match_vector", "nest_store"]

#: vector-unit operations of two tensors, of a tensor and a scalar, of one tensor
BINARY = {BinaryOp.ADD: "Add", BinaryOp.SUB: "Sub", BinaryOp.MUL: "Mul", BinaryOp.DIV: "Div",
          BinaryOp.MAX: "Max", BinaryOp.MIN: "Min"}
SCALAR = {BinaryOp.ADD: "Adds", BinaryOp.MUL: "Muls", BinaryOp.MAX: "Maxs",
          BinaryOp.MIN: "Mins"}
UNARY = {UnaryOp.EXP: "Exp", UnaryOp.LOG: "Ln", UnaryOp.ABS: "Abs", UnaryOp.SQRT: "Sqrt"}
REDUCE = {ReduceOp.SUM: "ReduceSum", ReduceOp.MAX: "ReduceMax", ReduceOp.MIN: "ReduceMin"}
VECTOR_DTYPES = (DType.FLOAT32, DType.FLOAT16)
BLOCK_BYTES = 32


def _guarded_body(loop: For) -> tuple[Stmt, Expr | None]:
    """The loop's body without a guard ``if (cond)`` (no else) around it, and the guard."""
    body = loop.body
    if isinstance(body, IfThenElse) and body.else_body is None:
        return body.then_body, body.cond
    return body, None


def _offset(buffer: Buffer, indices: tuple[Expr, ...], var: Var) -> Expr | None:
    """The flat offset of ``buffer[indices]`` at ``var = 0`` when it steps by one element per
    ``var`` (else None)."""
    flat = flat_index(buffer, indices)
    form = linear_form(flat, var)
    if form is None or form.coefficient(var) != 1:
        return None
    return simplify(substitute(flat, {var: const(0)}))


def _count_limit(cond: Expr | None, var: Var) -> Expr | None | bool:
    """For a guard ``lhs < rhs`` with ``lhs`` stepping by one per ``var``: ``rhs - lhs(0)``,
    the number of leading iterations it lets through; True without a guard; None when the
    guard has another form."""
    if cond is None:
        return True
    if not isinstance(cond, Compare) or cond.op is not CompareOp.LT:
        return None
    if any(node == var for node in walk_expr(cond.b)):
        return None
    form = linear_form(cond.a, var)
    if form is None or form.coefficient(var) != 1:
        return None
    return simplify(cond.b - substitute(cond.a, {var: const(0)}))


@dataclass(frozen=True)
class Row:
    """``dst[dst_offset + t] = src[src_offset + t]`` for ``t < min(extent, limit)``."""

    dst: Buffer
    dst_offset: Expr
    src: Buffer
    src_offset: Expr
    extent: int
    limit: Expr | None  # None: all ``extent`` elements


def match_row(loop: For) -> Row | None:
    """A contiguous copy of one run of elements (module docstring)."""
    if not isinstance(loop.extent, Const):
        return None
    body, cond = _guarded_body(loop)
    if not isinstance(body, Store) or body.accumulate is not None:
        return None
    value = body.value
    if not isinstance(value, BufferLoad) or value.buffer.dtype != body.buffer.dtype:
        return None
    limit = _count_limit(cond, loop.var)
    if limit is None:
        return None
    dst = _offset(body.buffer, body.indices, loop.var)
    src = _offset(value.buffer, value.indices, loop.var)
    if dst is None or src is None:
        return None
    return Row(body.buffer, dst, value.buffer, src, int(loop.extent.value),
               None if limit is True else limit)


@dataclass(frozen=True)
class VectorOp:
    """``call(dst[dst_offset..], operands..., [scalar], count)`` on the vector unit."""

    call: str
    dst: Buffer
    dst_offset: Expr
    operands: tuple[tuple[Buffer, Expr], ...]
    scalar: Expr | None
    count: int


def _aligned(offset: Expr, buffer: Buffer) -> bool:
    """Whether a flat element offset is provably a multiple of a 32-byte block."""
    elements = BLOCK_BYTES // buffer.dtype.bytes
    form = linear_form(offset, Var("tc_none"))
    return form is not None and form.multiple_of(elements)


def _vector_operand(expr: Expr, var: Var, level: str,
                    dtype: DType) -> tuple[Buffer, Expr] | None:
    if not isinstance(expr, BufferLoad) or expr.buffer.level != level \
            or expr.buffer.dtype != dtype:
        return None
    offset = _offset(expr.buffer, expr.indices, var)
    if offset is None or not _aligned(offset, expr.buffer):
        return None
    return expr.buffer, offset


def match_vector(loop: For, level: str) -> VectorOp | None:
    """An elementwise vector-unit operation over the loop (module docstring); operands in
    ``level`` (the unit's buffer), all of the destination's dtype."""
    if not isinstance(loop.extent, Const) or not isinstance(loop.body, Store):
        return None
    store = loop.body
    dtype = store.buffer.dtype
    if store.accumulate is not None or store.buffer.level != level or dtype not in VECTOR_DTYPES:
        return None
    dst = _offset(store.buffer, store.indices, loop.var)
    if dst is None or not _aligned(dst, store.buffer):
        return None
    count = int(loop.extent.value)
    value, var = store.value, loop.var

    def operand(expr: Expr) -> tuple[Buffer, Expr] | None:
        return _vector_operand(expr, var, level, dtype)

    if isinstance(value, Binary) and value.dtype == dtype:
        a, b = operand(value.a), operand(value.b)
        if a and b and value.op in BINARY:
            return VectorOp(BINARY[value.op], store.buffer, dst, (a, b), None, count)
        scalar = value.b if a else value.a if b else None
        source = a or b
        if source and isinstance(scalar, Const) and value.op in SCALAR and \
                (a is not None or value.op is not BinaryOp.SUB):
            if value.op is BinaryOp.MAX and float(scalar.value) == 0.0:
                return VectorOp("Relu", store.buffer, dst, (source,), None, count)
            return VectorOp(SCALAR[value.op], store.buffer, dst, (source,), scalar, count)
    if isinstance(value, Unary) and value.op in UNARY and value.dtype == dtype:
        source = operand(value.x)
        if source:
            return VectorOp(UNARY[value.op], store.buffer, dst, (source,), None, count)
    if isinstance(value, Cast) and isinstance(value.x, BufferLoad) and \
            {value.x.dtype, dtype} == set(VECTOR_DTYPES):
        source = _vector_operand(value.x, var, level, value.x.dtype)
        if source:
            return VectorOp("Cast", store.buffer, dst, (source,), None, count)
    return None


@dataclass(frozen=True)
class Reduction:
    """``acc[acc_indices] op= reduce(src[src_offset .. + count])``."""

    call: str
    op: ReduceOp
    acc: Store
    src: Buffer
    src_offset: Expr
    count: int


def match_reduction(loop: For, level: str) -> Reduction | None:
    """A float32 reduction of a contiguous run into one element (module docstring)."""
    if not isinstance(loop.extent, Const) or not isinstance(loop.body, Store):
        return None
    store = loop.body
    if store.accumulate not in REDUCE or store.buffer.dtype is not DType.FLOAT32 \
            or store.buffer.level != level:
        return None
    if any(node == loop.var for index in store.indices for node in walk_expr(index)):
        return None
    source = _vector_operand(store.value, loop.var, level, DType.FLOAT32)
    if source is None:
        return None
    return Reduction(REDUCE[store.accumulate], store.accumulate, store, source[0], source[1],
                     int(loop.extent.value))


def nest_store(stmt: Stmt) -> Store | None:
    """The store at the bottom of a perfect nest of loops and guards (no else), or None."""
    while True:
        if isinstance(stmt, Store):
            return stmt
        if isinstance(stmt, For):
            stmt = stmt.body
        elif isinstance(stmt, IfThenElse) and stmt.else_body is None:
            stmt = stmt.then_body
        else:
            return None


@dataclass(frozen=True)
class Contraction:
    """``c[i, j] sum= a[i, k] * b[k, j]`` over a whole Cube tile."""

    c: Buffer
    a: Buffer
    b: Buffer


def _strip_cast(expr: Expr) -> Expr:
    return expr.x if isinstance(expr, Cast) else expr


def match_contraction(stmt: Stmt, levels: tuple[str, str, str]) -> Contraction | None:
    """The Cube's tile (module docstring); ``levels`` are the L0A, L0B, L0C names."""
    loops: list[For] = []
    node: Stmt = stmt
    while not isinstance(node, Store):
        if isinstance(node, For):
            loops.append(node)
            node = node.body
        elif isinstance(node, IfThenElse) and node.else_body is None:
            node = node.then_body
        else:
            return None
    store = node
    # float32(A * B) on float16 operands is the exact product too (te's arithmetic on half
    # values runs unrounded in float; only a store or a cast to a half type rounds)
    value = _strip_cast(store.value)
    if store.accumulate is not ReduceOp.SUM or store.buffer.level != levels[2] \
            or not isinstance(value, Binary) or value.op is not BinaryOp.MUL:
        return None
    a, b = _strip_cast(value.a), _strip_cast(value.b)
    if not (isinstance(a, BufferLoad) and isinstance(b, BufferLoad)):
        return None
    c_buf, a_buf, b_buf = store.buffer, a.buffer, b.buffer
    if (a_buf.level, b_buf.level) != levels[:2] or any(
            len(buf.shape) != 2 for buf in (a_buf, b_buf, c_buf)):
        return None
    (ci, cj), (ai, ak), (bk, bj) = store.indices, a.indices, b.indices
    if ci != ai or cj != bj or ak != bk:
        return None
    extents = {loop.var: loop.extent for loop in loops}
    m, n, k = c_buf.shape[0], c_buf.shape[1], a_buf.shape[1]
    if a_buf.shape[0] != m or b_buf.shape != (k, n):
        return None
    # each of i, j, k runs over its whole dimension: a loop of that extent, or 0 of 1
    for index, size in ((ci, m), (cj, n), (ak, k)):
        whole_loop = isinstance(index, Var) and isinstance(extents.get(index), Const) \
            and int(extents[index].value) == size
        if not whole_loop and not (isinstance(index, Const) and size == 1 and index.value == 0):
            return None
    if len({ci, cj, ak} & set(extents)) != len(loops):
        return None
    return Contraction(c_buf, a_buf, b_buf)
