"""The one error family of tilecraft.

Every error names the culprit (tensor, axis, plugin, file, field) and what to do about it.

>>> try:
...     raise ShapeError("A[i, k] has 2 indices but A has 3 dimensions; index every dimension")
... except TilecraftError as err:
...     print(type(err).__name__)
ShapeError
"""

from __future__ import annotations


class TilecraftError(Exception):
    """Base of every error tilecraft raises on purpose."""


class ExpressionError(TilecraftError):
    """A tensor expression is malformed (wrong arity, misuse of a reduce axis, ...)."""


class DTypeError(ExpressionError):
    """Operands of an expression disagree on their dtype, or a dtype is unknown."""


class ShapeError(ExpressionError):
    """A shape or an index count does not match the tensor it describes."""


class IndexBoundsError(ExpressionError):
    """An index expression can fall outside the tensor it reads."""


class ReduceAxisError(ExpressionError):
    """A reduce axis is used outside its reduction, or a reduction is misplaced."""


class GraphError(TilecraftError):
    """A graph is malformed (duplicate names, cycles, missing producers)."""


class TargetError(TilecraftError):
    """A target is unknown, broken, or cannot do what was asked on this machine."""


class PluginError(TargetError):
    """A plugin failed to load or declared something invalid."""


class LoweringError(TilecraftError):
    """A compute cannot be lowered to Kernel IR with the requested schedule."""


class CodegenError(TilecraftError):
    """A code generator cannot express a Kernel IR construct, or its output failed to build."""


class BuildError(CodegenError):
    """A target's toolchain rejected generated source: the message names the kernel, the file
    holding the source and the command that reproduces the failure, then the tool's log."""


class InputError(TilecraftError):
    """Arrays passed to an Executable are missing, extra, or of the wrong shape or dtype."""


class AllocationError(TilecraftError):
    """A tensor (or a call's set of tensors) needs more memory than this machine can give."""


class AutodiffError(TilecraftError):
    """A gradient cannot be derived: a non-differentiable or integer compute, or an index
    function outside the solvable class (affine beyond floordiv/mod by constants)."""


class AutodiffWarning(UserWarning):
    """A gradient asked for is identically zero (the output does not depend on the tensor)."""
