"""Replaceable micro-kernels (thesis §3.4.1.2): contractions recognised in te, lowered to
packing plus blocked loops around a target's register-tile micro-kernel, whose parameters
come from the register-budget model of Eq. 3.4."""

from tilecraft.microkernel.contraction import Contraction, as_contraction
from tilecraft.microkernel.lowering import Blocking, lower_contraction

__all__ = ["Blocking", "Contraction", "as_contraction", "lower_contraction"]
