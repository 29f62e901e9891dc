"""Affine forms of index expressions: the core's :mod:`tilecraft.codegen.affine`, shared with
every C-family code generator (kept here so that ``tilecraft_nvidia_tc.codegen.affine`` still
names it)."""

from tilecraft.codegen.affine import LinearForm, linear_form

__all__ = ["LinearForm", "linear_form"]
