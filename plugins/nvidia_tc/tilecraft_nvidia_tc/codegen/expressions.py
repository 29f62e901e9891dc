"""Kernel IR expressions as CUDA C expressions: the core's C-family printer
(:mod:`tilecraft.codegen.c_expressions`) in the CUDA dialect (:mod:`.dtypes`).

>>> from tilecraft.te import Var
>>> i = Var("i")
>>> printer = ExprPrinter("k", Names(), {i: (0, 95)})
>>> printer.expr((i // 13) * 2 + i % 13)
'(((i / 13) * 2) + (i % 13))'
>>> printer.expr((i - 50) // 13)
'tc_floordiv((i - 50), 13)'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tilecraft.codegen.c_expressions import CExprPrinter, int_range_of
from tilecraft.codegen.c_expressions import Names as CNames
from tilecraft.kernel_ir.nodes import Buffer
from tilecraft.te.expr import Expr, Var
from tilecraft_nvidia_tc.codegen.dtypes import CUDA

__all__ = ["ExprPrinter", "Names", "int_range_of"]


class Names(CNames):
    """Identifiers of one kernel, never a CUDA built-in (``threadIdx`` ...)."""

    def __init__(self) -> None:
        super().__init__(CUDA.reserved)


class ExprPrinter(CExprPrinter):
    """The C-family printer in the CUDA dialect (see :class:`CExprPrinter`)."""

    def __init__(self, kernel_name: str, names: CNames,
                 ranges: Mapping[Var, tuple[int, int]] | None = None,
                 access: Callable[[Buffer, tuple[Expr, ...]], str] | None = None) -> None:
        super().__init__(kernel_name, names, CUDA, ranges, access)
