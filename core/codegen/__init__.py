"""What every C-family code generator (CUDA C, OpenCL C, HLS C++ ...) prints the same way.

- :mod:`.c_dialect`: element types, literals, casts and half conversions, with hooks for what a
  language does differently (:class:`CDialect`);
- :mod:`.c_expressions`: identifiers (:class:`Names`), index ranges, the expression printer
  (:class:`CExprPrinter`), row-major offsets and accumulation steps;
- :mod:`.affine`: affine forms of index expressions (what widening an access needs proven).

Target plugins subclass :class:`CDialect` and print their statements themselves.
"""

from tilecraft.codegen.affine import LinearForm, linear_form
from tilecraft.codegen.c_dialect import C_KEYWORDS, CDialect
from tilecraft.codegen.c_expressions import (
    CExprPrinter,
    Names,
    combine,
    flat_index,
    int_range_of,
)

__all__ = ["C_KEYWORDS", "CDialect", "CExprPrinter", "LinearForm", "Names", "combine",
           "flat_index", "int_range_of", "linear_form"]
