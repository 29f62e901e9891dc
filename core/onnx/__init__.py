"""ONNX import (the optional extra ``tilecraft[onnx]``): :func:`from_onnx` gives the same
Graph the Python API builds; :mod:`tilecraft.onnx_backend` runs ONNX models through it.

>>> from tilecraft.onnx import from_onnx  # doctest: +SKIP
"""

from tilecraft.onnx.loader import from_onnx
from tilecraft.onnx.values import ConstantRequired, OnnxImportError, UnsupportedNode

__all__ = ["ConstantRequired", "OnnxImportError", "UnsupportedNode", "from_onnx"]
