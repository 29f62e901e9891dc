"""Recognise a compute as a contraction ``C[batch, m, n] = sum_k A(batch, m, k) * B(batch, n, k)``.

A micro-kernel of the outer-product kind (thesis §3.4.1.2) computes a block of a matrix
product. Any compute whose body is a sum of a product of two loads can be fed to it once its
axes are sorted into four groups by which operands they index:

- batch axes index both operands and the output;
- m axes index only the first operand ("A") and the output;
- n axes index only the second operand ("B") and the output;
- k axes are the reduce axes; each must index both operands.

The output must be laid out ``[batch..., m..., n...]`` (axes of extent 1 anywhere are ignored),
so that an ``MI x NR`` register tile is ``MI`` rows of ``NR`` contiguous elements. Operand
index expressions are arbitrary: packing evaluates them (a convolution's input, read through its
``pad`` compute with ``p + r``, is packed the way im2col would lay it out, without materialising
im2col).

With ``broadcast_batch=True`` the leading output axes that only the second operand ("B") reads
become batch axes too, A being the same for every batch element: a batched NCHW convolution
``y[n, k, h, w] = sum W[k, c, r, s] * x[n, c, h + r, w + s]`` is then ``n`` GEMMs of the
batch-1 form sharing ``W`` (a target whose packing follows :attr:`Contraction.a_batched`).
Without it such a compute is not a contraction (the default: batch axes index both operands).

>>> from tilecraft import ops, te
>>> A = te.placeholder((6, 5), name="A")
>>> B = te.placeholder((5, 7), name="B")
>>> c = as_contraction(ops.matmul(A, B))
>>> [a.name for a in c.m_axes], [a.name for a in c.n_axes], [a.name for a in c.k_axes]
(['i'], ['j'], ['k'])
>>> c.extents()
(1, 6, 7, 5)

Dot-product instructions (x86 ``vpdpbusd`` / ``vdpbf16ps``, Arm ``sdot``, Mali ``arm_dot``) let
each 32-bit lane consume a *group* of consecutive ``k`` values per step: 4 bytes, or 2
bfloat16. :func:`as_dot_product_contraction` recognises the contractions they run,
``C = sum_k cast(A) * cast(B)`` with uint8/int8 operands and an int32 result
(``ops.matmul(A, B, out_dtype="int32")``, ``ops.conv2d``), or bfloat16 operands with a float32
or bfloat16 result; the axes are sorted as above.

>>> A8 = te.placeholder((5, 7), "int8", name="A8")
>>> B8 = te.placeholder((7, 20), "uint8", name="B8")
>>> dot = as_dot_product_contraction(ops.matmul(A8, B8, out_dtype="int32"))
>>> dot.group, dot.accumulator.value, dot.contraction.extents()
(4, 'int32', (1, 5, 20, 7))
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.dtypes import DType
from tilecraft.te.expr import Binary, BinaryOp, Cast, Expr, IterVar, Load, Reduce, ReduceOp
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import vars_in

#: the 8-bit integer operand dtypes of a dot-product contraction
INT8_TYPES = (DType.INT8, DType.UINT8)


@dataclass(frozen=True)
class Contraction:
    """A compute seen as a batched matrix product (see the module docstring)."""

    tensor: Tensor
    a: Load
    b: Load
    batch_axes: tuple[IterVar, ...]
    m_axes: tuple[IterVar, ...]
    n_axes: tuple[IterVar, ...]
    k_axes: tuple[IterVar, ...]

    def extents(self) -> tuple[int, int, int, int]:
        """``(batch, M, N, K)``: the products of each group's extents."""
        return tuple(_product(a.extent for a in group)  # type: ignore[return-value]
                     for group in (self.batch_axes, self.m_axes, self.n_axes, self.k_axes))

    @property
    def flops(self) -> int:
        batch, m, n, k = self.extents()
        return 2 * batch * m * n * k

    @property
    def a_batched(self) -> bool:
        """Whether A depends on the batch axes (false for a ``broadcast_batch`` contraction,
        whose A every batch element shares)."""
        return bool(_axes_of(self.a) & set(self.batch_axes))


def _product(values) -> int:
    total = 1
    for value in values:
        total *= value
    return total


def _strip_cast(expr: Expr) -> Expr:
    while isinstance(expr, Cast):
        expr = expr.x
    return expr


def _axes_of(load: Load) -> set[IterVar]:
    found: set[IterVar] = set()
    for index in load.indices:
        found |= {v for v in vars_in(index) if isinstance(v, IterVar)}
    return found


def as_contraction(tensor: Tensor, dtype: DType = DType.FLOAT32,
                   broadcast_batch: bool = False) -> Contraction | None:
    """The contraction form of ``tensor``, or ``None`` when it is not one (or not of ``dtype``
    in both operands and the output); ``broadcast_batch``: see the module docstring.

    >>> from tilecraft import ops, te
    >>> x = te.placeholder((8, 3, 9, 9), name="x")
    >>> w = te.placeholder((4, 3, 3, 3), name="w")
    >>> y = ops.conv2d(x, w)
    >>> as_contraction(y) is None
    True
    >>> c = as_contraction(y, broadcast_batch=True)
    >>> c.extents(), c.a.tensor.name, c.a_batched
    ((8, 4, 49, 27), 'w', False)
    """
    if tensor.is_placeholder or tensor.dtype is not dtype:
        return None
    body = tensor.op.body
    if not isinstance(body, Reduce) or body.op is not ReduceOp.SUM:
        return None
    product = _strip_cast(body.body)
    if not isinstance(product, Binary) or product.op is not BinaryOp.MUL:
        return None
    left, right = _strip_cast(product.a), _strip_cast(product.b)
    if not (isinstance(left, Load) and isinstance(right, Load)):
        return None
    if left.tensor.dtype is not dtype or right.tensor.dtype is not dtype:
        return None
    return group_axes(tensor, left, right, tuple(body.axes), broadcast_batch)


def group_axes(tensor: Tensor, left: Load, right: Load, k_axes: tuple[IterVar, ...],
               broadcast_batch: bool = False) -> Contraction | None:
    """The contraction of ``tensor`` whose product reads ``left`` and ``right`` over the reduce
    axes ``k_axes``: its axes sorted into batch / m / n / k (see the module docstring), or
    ``None`` when they do not sort (an axis neither operand reads, a k axis one of them lacks,
    an output not laid out ``[batch..., m..., n...]``). ``broadcast_batch``: leading axes only
    the n side reads may be batch axes (see the module docstring)."""
    left_axes, right_axes = _axes_of(left), _axes_of(right)
    if any(k not in left_axes or k not in right_axes for k in k_axes if k.extent > 1):
        return None
    groups: list[str] = []
    for axis in tensor.axes:
        if axis.extent == 1:
            continue
        in_left, in_right = axis in left_axes, axis in right_axes
        if in_left and in_right:
            groups.append("batch")
        elif in_left:
            groups.append("left")
        elif in_right:
            groups.append("right")
        else:
            return None
    spatial = [a for a in tensor.axes if a.extent > 1]
    # the output's contiguous (trailing) group is the n side: B is the operand it indexes
    if not groups or groups[-1] == "batch":
        return None
    n_side = groups[-1]
    m_side = "right" if n_side == "left" else "left"
    order = {"batch": 0, m_side: 1, n_side: 2}
    ranks = [order[g] for g in groups]
    if ranks != sorted(ranks) and broadcast_batch:
        lead = 0
        while lead < len(groups) and groups[lead] in ("batch", n_side):
            lead += 1
        if 0 < lead < len(groups):
            groups[:lead] = ["batch"] * lead
            ranks = [order[g] for g in groups]
    if ranks != sorted(ranks):
        return None
    a, b = (left, right) if m_side == "left" else (right, left)
    pick = {g: tuple(ax for ax, grp in zip(spatial, groups) if grp == g) for g in order}
    return Contraction(tensor, a, b, pick["batch"], pick[m_side], pick[n_side],
                       tuple(k for k in k_axes if k.extent > 1))


@dataclass(frozen=True)
class DotProductContraction:
    """A contraction whose operands are int8/uint8 (int32 result) or bfloat16 (float32 or
    bfloat16 result), for a micro-kernel that takes ``group`` values of ``k`` per 32-bit lane
    (see the module docstring)."""

    contraction: Contraction
    accumulator: DType

    @property
    def group(self) -> int:
        """``k`` values per 32-bit lane: 4 bytes, or 2 bfloat16."""
        return 4 if self.contraction.a.tensor.dtype in INT8_TYPES else 2

    @property
    def a_dtype(self) -> DType:
        return self.contraction.a.tensor.dtype

    @property
    def b_dtype(self) -> DType:
        return self.contraction.b.tensor.dtype


def _dot_operand(expr: Expr, accumulator: DType, out: DType) -> Load | None:
    """The load of one factor: ``cast(acc, load)``, or the bare load of a bfloat16 product
    (``ops.matmul`` of bfloat16 tensors: computed in float32, rounded once on store)."""
    if isinstance(expr, Cast) and expr.dtype is accumulator and isinstance(expr.x, Load):
        return expr.x
    if isinstance(expr, Load) and expr.dtype is DType.BFLOAT16 is out:
        return expr
    return None


def as_dot_product_contraction(tensor: Tensor) -> DotProductContraction | None:
    """``tensor`` as a contraction of int8/uint8 operands into int32, or of bfloat16 operands
    into float32 or bfloat16; ``None`` when it is not one (see the module docstring)."""
    if tensor.is_placeholder:
        return None
    body = tensor.op.body
    if not isinstance(body, Reduce) or body.op is not ReduceOp.SUM:
        return None
    product = body.body
    if not isinstance(product, Binary) or product.op is not BinaryOp.MUL:
        return None
    out = tensor.dtype
    accumulator = DType.FLOAT32 if out is DType.BFLOAT16 else out
    left = _dot_operand(product.a, accumulator, out)
    right = _dot_operand(product.b, accumulator, out)
    if left is None or right is None:
        return None
    dtypes = {left.tensor.dtype, right.tensor.dtype}
    int8 = out is DType.INT32 and dtypes <= set(INT8_TYPES)
    bf16 = out in (DType.FLOAT32, DType.BFLOAT16) and dtypes == {DType.BFLOAT16}
    if not (int8 or bf16):
        return None
    contraction = group_axes(tensor, left, right, tuple(body.axes))
    if contraction is None:
        return None
    return DotProductContraction(contraction, accumulator)


__all__ = ["INT8_TYPES", "Contraction", "DotProductContraction", "as_contraction",
           "as_dot_product_contraction", "group_axes"]
