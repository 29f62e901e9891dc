"""One visitor and one transformer for every Kernel IR consumer.

:class:`KernelVisitor` dispatches ``visit(stmt, *args)`` to ``visit_<ClassName>(stmt, *args)``
(looked up along the class's MRO, so a subclass of a node is handled like the node unless the
visitor names it), else to :meth:`KernelVisitor.generic_visit`, which visits the child
statements. :class:`KernelTransformer` rebuilds: its ``generic_visit`` returns the statement
with transformed children and expressions (:meth:`KernelTransformer.visit_expr`), the very
same object when nothing changed. :func:`walk_stmts` lists every statement of a tree.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir.nodes import Buffer, For, LoopKind, Store
>>> from tilecraft.te import Var, const
>>> A = Buffer("A", (4,), DType.FLOAT32)
>>> i = Var("i")
>>> loop = For(i, const(4), LoopKind.SERIAL, Store(A, (i,), const(1.0)))
>>> class CountStores(KernelVisitor[None]):
...     def __init__(self):
...         self.count = 0
...     def visit_Store(self, stmt):
...         self.count += 1
>>> counter = CountStores(); counter.visit(loop); counter.count
1
>>> class Double(KernelTransformer):
...     def visit_expr(self, expr):
...         return expr * 2.0 if expr.dtype == DType.FLOAT32 else expr
>>> print(Double().visit(loop))
for i in serial(4):
  A[i] = 1.0 * 2.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from tilecraft.kernel_ir.nodes import Region, Stmt
from tilecraft.te.expr import Expr

__all__ = ["KernelTransformer", "KernelVisitor", "stmt_children", "walk_stmts"]

R = TypeVar("R")


def stmt_children(stmt: Stmt) -> tuple[Stmt, ...]:
    """The direct child statements of ``stmt``, in order."""
    found: list[Stmt] = []
    for name in type(stmt).child_fields:
        value = getattr(stmt, name)
        if isinstance(value, tuple):
            found.extend(value)
        elif value is not None:
            found.append(value)
    return tuple(found)


def walk_stmts(stmt: Stmt) -> Iterator[Stmt]:
    """Every statement of the tree under ``stmt`` (itself included), parents first."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(stmt_children(node)))


class KernelVisitor(Generic[R]):
    """Dispatch on the statement's class (module docstring)."""

    _methods: dict[type, str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._methods = {}

    def visit(self, stmt: Stmt, *args: Any) -> R:
        kind = type(stmt)
        name = self._methods.get(kind)
        if name is None:
            name = next((f"visit_{base.__name__}" for base in kind.__mro__
                         if hasattr(self, f"visit_{base.__name__}")), "generic_visit")
            self._methods[kind] = name
        method: Callable[..., R] = getattr(self, name)
        return method(stmt, *args)

    def generic_visit(self, stmt: Stmt, *args: Any) -> Any:
        for child in stmt_children(stmt):
            self.visit(child, *args)
        return None


class KernelTransformer(KernelVisitor[Stmt]):
    """Rebuild a statement tree; override ``visit_<Node>`` and/or :meth:`visit_expr`."""

    def visit_expr(self, expr: Expr) -> Expr:
        """The replacement of one expression field (identity by default)."""
        return expr

    def generic_visit(self, stmt: Stmt, *args: Any) -> Stmt:
        changes: dict[str, Any] = {}
        kind = type(stmt)
        for name in kind.child_fields:
            value = getattr(stmt, name)
            if isinstance(value, tuple):
                new: Any = tuple(self.visit(child, *args) for child in value)
                changed = any(a is not b for a, b in zip(new, value))
            elif value is not None:
                new = self.visit(value, *args)
                changed = new is not value
            else:
                continue
            if changed:
                changes[name] = new
        for name in kind.expr_fields:
            value = getattr(stmt, name)
            new = self._field(value)
            if new is not value:
                changes[name] = new
        return dataclasses.replace(stmt, **changes) if changes else stmt  # type: ignore[type-var]

    def _field(self, value: Any) -> Any:
        if isinstance(value, tuple):
            new = tuple(self._field(item) for item in value)
            return new if any(a is not b for a, b in zip(new, value)) else value
        if isinstance(value, Region):
            base = self._field(value.base)
            return value if base is value.base else dataclasses.replace(value, base=base)
        return self.visit_expr(value)
