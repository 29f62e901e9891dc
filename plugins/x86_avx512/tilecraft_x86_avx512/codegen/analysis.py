"""Static questions the x86 code generator asks of Kernel IR before emitting anything.

- which constructs x86 cannot express (:func:`check_supported`);
- where the kernel's PARALLEL loop is, and whether its iterations may run on threads;
- how an index depends on a vector loop's variable (:func:`affine_coefficient`), which
  decides between contiguous vector loads, broadcasts and gathers;
- whether a VECTOR loop's body can be emitted in vector form (:func:`vector_blocker`);
- a rough amount of work, used to decide whether threads are worth starting.

>>> from tilecraft.te import Var, const
>>> i, j = Var("i"), Var("j")
>>> affine_coefficient(i * 4 + j + 3, j), affine_coefficient(i * 4 + j, i)
(1, 4)
>>> affine_coefficient((j * 2) // 2, j) is None, affine_coefficient(i + 1, j)
(True, 0)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.concurrency import (
    AsyncCopy,
    AtomicUpdate,
    CommitGroup,
    Dataflow,
    Pipeline,
    SubgroupReduce,
    WaitGroup,
)
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Barrier,
    Buffer,
    Copy,
    For,
    IfThenElse,
    IntrinsicCall,
    Kernel,
    LoopKind,
    MicroKernelCall,
    Seq,
    Stmt,
    Store,
    StreamPop,
    StreamPush,
)
from tilecraft.kernel_ir.visitor import stmt_children, walk_stmts
from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Cast,
    Const,
    Expr,
    IterVar,
    Load,
    Reduce,
    Var,
)
from tilecraft.te.visit import children as expr_children
from tilecraft_x86_avx512.codegen.intrinsic import check_intrinsic_call

SUPPORTED_LOOP_KINDS = (LoopKind.SERIAL, LoopKind.PARALLEL, LoopKind.VECTOR, LoopKind.UNROLLED)


# expressions ---------------------------------------------------------------------------------
def walk_expr(expr: Expr) -> Iterator[Expr]:
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(expr_children(node))


def depends_on(expr: Expr, var: Var) -> bool:
    return any(node == var for node in walk_expr(expr) if isinstance(node, Var))


def const_int(expr: Expr) -> int | None:
    """The value of an integer expression made of constants only (else None)."""
    if isinstance(expr, Const) and not isinstance(expr.value, bool) \
            and isinstance(expr.value, int):
        return expr.value
    if isinstance(expr, Binary) and expr.dtype.is_int:
        a, b = const_int(expr.a), const_int(expr.b)
        if a is None or b is None:
            return None
        if expr.op is BinaryOp.ADD:
            return a + b
        if expr.op is BinaryOp.SUB:
            return a - b
        if expr.op is BinaryOp.MUL:
            return a * b
        if expr.op is BinaryOp.MAX:
            return max(a, b)
        if expr.op is BinaryOp.MIN:
            return min(a, b)
        if expr.op in (BinaryOp.FLOORDIV, BinaryOp.MOD) and b != 0:
            return a // b if expr.op is BinaryOp.FLOORDIV else a % b
    return None


def _combined(expr: Binary, ca: int | None, cb: int | None) -> int | None:
    """The coefficient of ``expr`` (an integer ``+``, ``-`` or ``*``) from its operands'
    coefficients ``ca`` and ``cb``: ``None`` when either is, or for a product of two terms
    that both depend on the variable, or for another operator."""
    if ca is None or cb is None:
        return None
    if expr.op is BinaryOp.ADD:
        return ca + cb
    if expr.op is BinaryOp.SUB:
        return ca - cb
    if expr.op is BinaryOp.MUL:
        if ca == 0 and (k := const_int(expr.a)) is not None:
            return k * cb
        if cb == 0 and (k := const_int(expr.b)) is not None:
            return k * ca
    return None


def affine_coefficient(expr: Expr, var: Var) -> int | None:
    """``c`` when ``expr == c * var + (terms without var)`` for a constant ``c``; ``0`` when
    ``expr`` does not mention ``var``; None when the dependence is not affine."""
    if not depends_on(expr, var):
        return 0
    if isinstance(expr, Var):
        return 1
    if isinstance(expr, Binary) and expr.dtype.is_int:
        return _combined(expr, affine_coefficient(expr.a, var), affine_coefficient(expr.b, var))
    if isinstance(expr, Cast) and expr.dtype.is_int and expr.x.dtype.is_int:
        return affine_coefficient(expr.x, var)
    return None


def flat_coefficient(buffer: Buffer, indices: Sequence[Expr], var: Var) -> int | None:
    """The coefficient of ``var`` in the row-major element offset of ``buffer[indices]``."""
    total = 0
    for index, stride in zip(indices, buffer.strides()):
        coefficient = affine_coefficient(index, var)
        if coefficient is None:
            return None
        total += coefficient * stride
    return total


def unclamped(index: Expr) -> tuple[Expr, int | None, int | None] | None:
    """``(e, lo, hi)`` when ``index`` is ``e`` clamped by constants, ``max(min(e, hi), lo)``
    (either order, either side alone); None otherwise.

    >>> from tilecraft.te import Var
    >>> from tilecraft.te.expr import Binary, BinaryOp, const
    >>> w = Var("w")
    >>> e, lo, hi = unclamped(Binary(BinaryOp.MAX, Binary(BinaryOp.MIN, w - 1, const(55)),
    ...                              const(0)))
    >>> str(e), lo, hi
    ('(w - 1)', 0, 55)
    """
    lo = hi = None
    while isinstance(index, Binary) and index.op in (BinaryOp.MAX, BinaryOp.MIN):
        bound = const_int(index.b)
        if bound is None or (index.op is BinaryOp.MAX and lo is not None) \
                or (index.op is BinaryOp.MIN and hi is not None):
            break
        if index.op is BinaryOp.MAX:
            lo = bound
        else:
            hi = bound
        index = index.a
    if lo is None and hi is None:
        return None
    if lo is not None and hi is not None and lo > hi:
        return None
    return index, lo, hi


def _at_lane_zero_divisible(expr: Expr, var: Var, m: int) -> bool:
    """Whether ``expr`` is a multiple of ``m`` wherever ``var`` is (``var`` itself is taken as
    a multiple of ``m``: a vector loop's lane 0 runs at multiples of its lanes)."""
    if isinstance(expr, Const) and not isinstance(expr.value, bool) \
            and isinstance(expr.value, int):
        return expr.value % m == 0
    if isinstance(expr, Var):
        return expr == var
    if isinstance(expr, Cast) and expr.dtype.is_int and expr.x.dtype.is_int:
        return _at_lane_zero_divisible(expr.x, var, m)
    if isinstance(expr, Binary) and expr.dtype.is_int:
        a = _at_lane_zero_divisible(expr.a, var, m)
        b = _at_lane_zero_divisible(expr.b, var, m)
        if expr.op in (BinaryOp.ADD, BinaryOp.SUB):
            return a and b
        if expr.op is BinaryOp.MUL:
            return a or b
        if expr.op is BinaryOp.MOD:
            k = const_int(expr.b)
            return a and k is not None and k % m == 0
    return False


def lane_coefficient(expr: Expr, var: Var, lanes: int) -> int | None:
    """How ``expr`` moves from lane to lane of a vector loop over ``var`` whose lane 0 runs at
    multiples of ``lanes``: ``c`` when lane ``l`` has the value of lane 0 plus ``c * l``; None
    when it does not move so. Beyond :func:`affine_coefficient`, a floor division or modulo by
    a multiple of ``lanes`` of ``var + r`` (``r`` a multiple of ``lanes``) is lane-invariant
    (division) or moves by one (modulo) inside one vector — a head split's ``(t * 768 + d)
    // 64`` over 16 lanes. Only for addressing: across vectors such an index still varies.

    >>> from tilecraft.te import Var
    >>> i, j = Var("i"), Var("j")
    >>> lane_coefficient((i * 768 + j) // 64, j, 16), lane_coefficient((i * 768 + j) % 64, j, 16)
    (0, 1)
    >>> lane_coefficient((i * 768 + j) // 56, j, 16) is None
    True
    """
    if not depends_on(expr, var):
        return 0
    if isinstance(expr, Var):
        return 1
    if isinstance(expr, Cast) and expr.dtype.is_int and expr.x.dtype.is_int:
        return lane_coefficient(expr.x, var, lanes)
    if not (isinstance(expr, Binary) and expr.dtype.is_int):
        return None
    if expr.op in (BinaryOp.FLOORDIV, BinaryOp.MOD):
        k = const_int(expr.b)
        inner = lane_coefficient(expr.a, var, lanes)
        if k is None or k <= 0 or inner is None or depends_on(expr.b, var):
            return None
        if inner == 0:
            return 0
        if inner != 1 or k % lanes or not _at_lane_zero_divisible(expr.a, var, lanes):
            return None
        return 0 if expr.op is BinaryOp.FLOORDIV else 1
    return _combined(expr, lane_coefficient(expr.a, var, lanes),
                     lane_coefficient(expr.b, var, lanes))


def _recombined(terms: dict[Expr, int]) -> bool:
    """One step of ``K * (n // K) + (n % K) = n`` (scaled) on a linear form over atoms:
    replaces the pair by ``n``'s own terms; False when no pair is found."""
    for atom, scale in list(terms.items()):
        if not (isinstance(atom, Binary) and atom.op is BinaryOp.MOD):
            continue
        k = const_int(atom.b)
        if k is None or k <= 0:
            continue
        quotient = _linear_terms(Binary(BinaryOp.FLOORDIV, atom.a, atom.b))
        partner = next(iter(quotient)) if len(quotient) == 1 else None
        if partner is None or quotient[partner] != 1 or terms.get(partner) != scale * k:
            continue
        del terms[atom], terms[partner]
        for sub, coef in _linear_terms(atom.a).items():
            terms[sub] = terms.get(sub, 0) + coef * scale
        return True
    return False


def _linear_terms(expr: Expr) -> dict[Expr, int]:
    """``expr`` as ``sum(coef * atom)``: atoms are variables, constants' unit (``Const(1)``),
    and whatever is not a sum or a product by a constant (divisions, modulos, ...)."""
    if isinstance(expr, Const) and expr.dtype.is_int:
        return {Const(1, expr.dtype): int(expr.value)}
    if isinstance(expr, Cast) and expr.dtype.is_int and expr.x.dtype.is_int:
        return _linear_terms(expr.x)
    if isinstance(expr, Binary) and expr.dtype.is_int:
        if expr.op in (BinaryOp.ADD, BinaryOp.SUB):
            sign = 1 if expr.op is BinaryOp.ADD else -1
            terms = _linear_terms(expr.a)
            for atom, coef in _linear_terms(expr.b).items():
                terms[atom] = terms.get(atom, 0) + sign * coef
            return terms
        if expr.op is BinaryOp.MUL:
            for k, other in ((const_int(expr.a), expr.b), (const_int(expr.b), expr.a)):
                if k is not None:
                    return {atom: coef * k for atom, coef in _linear_terms(other).items()}
        if expr.op is BinaryOp.FLOORDIV and isinstance(expr.a, Binary) \
                and expr.a.op is BinaryOp.FLOORDIV:  # (n // a) // b == n // (a * b)
            a, b = const_int(expr.a.b), const_int(expr.b)
            if a is not None and b is not None and a > 0 and b > 0:
                return _linear_terms(Binary(BinaryOp.FLOORDIV, expr.a.a,
                                            Const(a * b, expr.b.dtype)))
    return {expr: 1}


def vector_flat_coefficient(buffer: Buffer, indices: Sequence[Expr], var: Var,
                            lanes: int) -> int | None:
    """The coefficient of ``var`` in the element offset of ``buffer[indices]`` inside one
    vector of a loop over ``var`` (see :func:`lane_coefficient`), also where a fused loop's
    ``f // K`` and ``f % K`` index adjacent dimensions (``K * (f // K) + f % K == f``)."""
    per_index = [lane_coefficient(index, var, lanes) for index in indices]
    if all(c is not None for c in per_index):
        return sum(c * stride for c, stride in zip(per_index, buffer.strides()))
    terms: dict[Expr, int] = {}
    for index, stride in zip(indices, buffer.strides()):
        for atom, coef in _linear_terms(index).items():
            terms[atom] = terms.get(atom, 0) + coef * stride
    while _recombined(terms):
        pass
    total = 0
    for atom, coef in terms.items():
        if coef == 0:
            continue
        c = lane_coefficient(atom, var, lanes)
        if c is None:
            return None
        total += c * coef
    return total


# statements ----------------------------------------------------------------------------------
def stmt_exprs(stmt: Stmt) -> tuple[Expr, ...]:
    """The expressions a statement evaluates itself (not those of nested statements)."""
    if isinstance(stmt, For):
        return (stmt.extent,)
    if isinstance(stmt, Store):
        return (*stmt.indices, stmt.value)
    if isinstance(stmt, IfThenElse):
        return (stmt.cond,)
    if isinstance(stmt, Copy):
        return (*stmt.dst.base, *stmt.src.base)
    return ()


_UNSUPPORTED_FIX = {
    Barrier: "x86 threads never synchronise inside a kernel; lower without barriers",
    StreamPush: "dataflow streams are an HLS construct; lower for x86 without stages",
    StreamPop: "dataflow streams are an HLS construct; lower for x86 without stages",
    Dataflow: "dataflow regions are an HLS construct; lower for x86 without stages",
    AsyncCopy: "x86 has no asynchronous copy engine; lower with plain copies",
    CommitGroup: "x86 has no asynchronous copy engine; lower with plain copies",
    WaitGroup: "x86 has no asynchronous copy engine; lower with plain copies",
    Pipeline: "x86 overlaps memory and compute in hardware; lower without software pipelines",
    AtomicUpdate: "x86 kernels give each thread its own outputs; lower without atomics",
    SubgroupReduce: "x86 has no thread subgroups; reduce in a loop instead",
}


def check_supported(kernel: Kernel) -> None:
    """Raise :class:`CodegenError` naming the first construct x86 cannot express."""
    where = f"kernel {kernel.name!r}"
    for stmt in walk_stmts(kernel.body):
        if type(stmt) in _UNSUPPORTED_FIX:
            raise CodegenError(f"x86_avx512 cannot generate {type(stmt).__name__} in {where}: "
                               f"{_UNSUPPORTED_FIX[type(stmt)]}")
        if isinstance(stmt, For) and stmt.kind not in SUPPORTED_LOOP_KINDS:
            kinds = ", ".join(kind.value for kind in SUPPORTED_LOOP_KINDS)
            raise CodegenError(
                f"x86_avx512 cannot generate the {stmt.kind.value} loop over "
                f"{stmt.var.name!r} in {where}: x86 loops are {kinds}; lower with the x86 "
                "target's loop kinds")
        if isinstance(stmt, IntrinsicCall):
            check_intrinsic_call(stmt, where)
        if not isinstance(stmt, (Seq, For, Allocate, IfThenElse, Store, Copy, MicroKernelCall,
                                 IntrinsicCall)):
            raise CodegenError(f"x86_avx512 does not know the statement {stmt!r} in {where}")
        for expr in stmt_exprs(stmt):
            for node in walk_expr(expr):
                if isinstance(node, Load):
                    raise CodegenError(
                        f"{where} reads the te tensor {node.tensor.name!r} directly (a te Load); "
                        "Kernel IR must read buffers with BufferLoad: lower the compute first")
                if isinstance(node, Reduce):
                    raise CodegenError(
                        f"{where} contains a te Reduce expression; lowering turns reductions "
                        "into accumulating Stores: lower the compute first")
                if isinstance(node, IterVar):
                    raise CodegenError(
                        f"{where} uses the te iteration variable {node.name!r}; Kernel IR "
                        "indexes with loop variables (te.Var): lower the compute first")
    for buffer in [*kernel.params, *(s.buffer for s in walk_stmts(kernel.body)
                                     if isinstance(s, Allocate))]:
        if buffer.layout != "row_major":
            raise CodegenError(
                f"buffer {buffer.name!r} of {where} has layout {buffer.layout!r}; x86 buffers "
                "are row_major: lower for x86 without layout changes")


@dataclass(frozen=True)
class ParallelLoop:
    """The kernel's PARALLEL loop, the Allocates around it, and whether chunks may run on
    different threads (``safe``; False when a store to a parameter inside it does not depend
    on its variable, i.e. iterations would race)."""

    loop: For
    allocates: tuple[Allocate, ...]
    safe: bool


def find_parallel_loop(kernel: Kernel) -> ParallelLoop | None:
    """The outermost PARALLEL loop (below Allocates only), or None; reject misplaced ones."""
    allocates: list[Allocate] = []
    top = kernel.body
    while isinstance(top, Allocate):
        allocates.append(top)
        top = top.body
    candidate = top if isinstance(top, For) and top.kind is LoopKind.PARALLEL else None
    for stmt in walk_stmts(kernel.body):
        if isinstance(stmt, For) and stmt.kind is LoopKind.PARALLEL and stmt is not candidate:
            raise CodegenError(
                f"kernel {kernel.name!r}: the PARALLEL loop over {stmt.var.name!r} is not the "
                "kernel's outermost loop (only Allocates may enclose it, and a kernel has at "
                "most one); make it SERIAL or move it outermost")
    if candidate is None:
        return None
    if const_int(candidate.extent) is None:
        raise CodegenError(
            f"kernel {kernel.name!r}: the PARALLEL loop over {candidate.var.name!r} has the "
            f"non-constant extent {candidate.extent}; the runtime splits a constant range "
            "across threads: give it a constant extent")
    params = set(kernel.params)
    safe = all(any(depends_on(index, candidate.var) for index in stmt.indices)
               for stmt in walk_stmts(candidate.body)
               if isinstance(stmt, Store) and stmt.buffer in params)
    return ParallelLoop(candidate, tuple(allocates), safe)


def written_buffers(kernel: Kernel) -> set[Buffer]:
    written = set()
    for stmt in walk_stmts(kernel.body):
        if isinstance(stmt, Store):
            written.add(stmt.buffer)
        elif isinstance(stmt, Copy):
            written.add(stmt.dst.buffer)
    return written


def estimate_work(stmt: Stmt, unknown_extent: int = 16) -> int:
    """Roughly how many element updates ``stmt`` performs (dynamic extents count as
    ``unknown_extent``). A micro-kernel or intrinsic call counts the elements of its operand
    regions (a GEMM tile call: ``MV*KI + KI*NC + MV*NC``), a lower bound on its work: calls
    counted as nothing left a template GEMM whose tiles need no zero-fill loop (92083a6)
    below the threads' threshold, and it ran on one thread.

    >>> from tilecraft.kernel_ir.nodes import Buffer, MicroKernelCall, Region
    >>> from tilecraft.te.expr import const
    >>> a, c = Buffer("a", (6, 8), "float32"), Buffer("c", (6, 4), "float32")
    >>> estimate_work(MicroKernelCall("mk", (Region(a, (const(0), const(0)), (6, 8)),
    ...                                      Region(c, (const(0), const(0)), (6, 4))), ()))
    72
    """
    if isinstance(stmt, (Store, Copy)):
        if isinstance(stmt, Copy):
            count = 1
            for extent in stmt.dst.extents:
                count *= extent
            return count
        return 1
    if isinstance(stmt, (MicroKernelCall, IntrinsicCall)):
        total = 0
        for region in stmt.operands:
            count = 1
            for extent in region.extents:
                count *= extent if isinstance(extent, int) else unknown_extent
            total += count
        return total
    if isinstance(stmt, For):
        extent = const_int(stmt.extent)
        return (unknown_extent if extent is None else max(extent, 0)) * estimate_work(stmt.body)
    return sum(estimate_work(child) for child in stmt_children(stmt))


# vector loops --------------------------------------------------------------------------------
def vector_blocker(loop: For) -> str | None:
    """Why the body of VECTOR ``loop`` cannot be emitted lane-parallel (None when it can)."""
    var = loop.var
    for stmt in walk_stmts(loop.body):
        if isinstance(stmt, Allocate):
            return f"its body allocates {stmt.buffer.name!r} (one buffer per lane)"
        if isinstance(stmt, Copy):
            return f"its body copies into {stmt.dst.buffer.name!r}"
        if isinstance(stmt, For) and depends_on(stmt.extent, var):
            return f"the extent of the inner loop over {stmt.var.name!r} varies across lanes"
        if isinstance(stmt, Store):
            coefficient = flat_coefficient(stmt.buffer, stmt.indices, var)
            if coefficient == 0 and stmt.accumulate is None and depends_on(stmt.value, var):
                return (f"it stores a lane-varying value to the lane-invariant location "
                        f"{stmt.buffer.name}[...]")
            if coefficient is None and stmt.accumulate is not None:
                return (f"it accumulates into {stmt.buffer.name}[...] at an index that is not "
                        "affine in the loop variable (lanes could collide)")
    return None


def reduction_stores(loop: For) -> list[Store]:
    """Accumulating stores of a vector loop's body (outside inner loops) into a location that
    does not depend on the loop variable: they keep lane-wise partial results."""
    found: dict[int, Store] = {}

    def visit(stmt: Stmt) -> None:
        if isinstance(stmt, Store):
            if stmt.accumulate is not None \
                    and flat_coefficient(stmt.buffer, stmt.indices, loop.var) == 0:
                found.setdefault(id(stmt), stmt)
        elif isinstance(stmt, (Seq, IfThenElse)):
            for child in stmt_children(stmt):
                visit(child)

    visit(loop.body)
    return list(found.values())

