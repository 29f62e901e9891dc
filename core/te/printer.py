"""Readable text for expressions, in the notation of thesis Eq. 2.1-2.5.

>>> from tilecraft import te
>>> A = te.placeholder((4, 4), name="A")
>>> i = te.reduce_axis(4, name="i")
>>> expr_to_str(te.exp(A[i, 0]) * 2.0)
'(exp(A[i, 0]) * 2.0)'
"""

from __future__ import annotations

from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Cast,
    Compare,
    Const,
    Expr,
    IterVar,
    Load,
    Logical,
    Not,
    Reduce,
    Select,
    Unary,
    UnaryOp,
    Var,
)


def expr_to_str(expr: Expr, top: bool = False) -> str:
    """Render ``expr``; ``top`` drops the outermost parentheses."""
    text = _render(expr)
    if top and isinstance(expr, Binary) and expr.op not in (BinaryOp.MAX, BinaryOp.MIN):
        return text[1:-1]
    return text


def _render(expr: Expr) -> str:
    if isinstance(expr, Const):
        if isinstance(expr.value, bool):
            return "true" if expr.value else "false"
        return repr(expr.value)
    if isinstance(expr, (IterVar, Var)):
        return expr.name
    if isinstance(expr, Binary):
        if expr.op in (BinaryOp.MAX, BinaryOp.MIN):
            return f"{expr.op.value}({_render(expr.a)}, {_render(expr.b)})"
        return f"({_render(expr.a)} {expr.op.value} {_render(expr.b)})"
    if isinstance(expr, Unary):
        if expr.op is UnaryOp.NEG:
            return f"-{_render(expr.x)}"
        return f"{expr.op.value}({_render(expr.x)})"
    if isinstance(expr, Compare):
        return f"({_render(expr.a)} {expr.op.value} {_render(expr.b)})"
    if isinstance(expr, Logical):
        return f"({_render(expr.a)} {expr.op.value} {_render(expr.b)})"
    if isinstance(expr, Not):
        return f"!{_render(expr.x)}"
    if isinstance(expr, Select):
        return (f"select({_render(expr.cond)}, {_render(expr.true_value)}, "
                f"{_render(expr.false_value)})")
    if isinstance(expr, Cast):
        return f"{expr.to.value}({_render(expr.x)})"
    if isinstance(expr, Load):
        return f"{expr.tensor.name}[{', '.join(_render(i) for i in expr.indices)}]"
    if isinstance(expr, Reduce):
        axes = ", ".join(axis.name for axis in expr.axes)
        return f"{expr.op.value}({expr_to_str(expr.body, top=True)}, axis=[{axes}])"
    render_hook = getattr(expr, "render_text", None)
    if render_hook is not None:  # IR extensions (e.g. Kernel IR's BufferLoad) render themselves
        return render_hook(_render)
    return repr(expr)
