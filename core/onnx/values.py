"""What ONNX values become in tilecraft: element types, constants and attributes.

An ONNX value during import is either a te :class:`~tilecraft.te.tensor.Tensor` (computed at run
time) or a numpy array (known at import time: an initializer, a ``Constant``, or a node whose
inputs are all known, folded by onnx's own reference evaluator). Shape-like inputs (Reshape's
shape, Slice's starts, ReduceX's axes) must be known.

tilecraft has no 64-bit integers and no boolean tensors: ``int64`` values become ``int32``
(values outside its range are refused) and ``bool`` values ``uint8`` 0/1.

>>> import numpy as np
>>> tilecraft_dtype(onnx_type("INT64")).value, tilecraft_dtype(onnx_type("BOOL")).value
('int32', 'uint8')
>>> narrow(np.array([True, False])).tolist()
[1, 0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.errors import TilecraftError
from tilecraft.te.tensor import Tensor

Value = Tensor | np.ndarray


class OnnxImportError(TilecraftError):
    """An ONNX model tilecraft cannot import (malformed, unsupported operator or attribute)."""


class UnsupportedNode(OnnxImportError):
    """One node cannot be converted: its operator, an attribute value or an input kind."""


class ConstantRequired(UnsupportedNode):
    """A node needs an input's value at import time (a shape, axes, indices) but it is only
    known at run time; ``input_name`` is the ONNX value's name."""

    def __init__(self, message: str, input_name: str):
        super().__init__(message)
        self.input_name = input_name


def onnx_type(name: str) -> int:
    """The TensorProto element-type number of ``name`` (``"FLOAT"``, ``"INT64"``...)."""
    from onnx import TensorProto

    return int(getattr(TensorProto, name))


_TYPE_NAMES = {"FLOAT": DType.FLOAT32, "FLOAT16": DType.FLOAT16, "BFLOAT16": DType.BFLOAT16,
               "INT8": DType.INT8, "UINT8": DType.UINT8, "INT32": DType.INT32,
               "INT64": DType.INT32, "BOOL": DType.UINT8}


def tilecraft_dtype(elem_type: int, what: str = "a value") -> DType:
    """The tilecraft dtype an ONNX element type is held in; UnsupportedNode for the others."""
    from onnx import TensorProto

    name = TensorProto.DataType.Name(elem_type)
    if name not in _TYPE_NAMES:
        raise UnsupportedNode(f"{what} has element type {name}, which tilecraft has no dtype for "
                              f"(it has {', '.join(sorted(_TYPE_NAMES))}); convert the model's "
                              "values to float32 first")
    return _TYPE_NAMES[name]


def narrow(array: np.ndarray, what: str = "a constant") -> np.ndarray:
    """``array`` in the numpy dtype tilecraft holds it in: int64 as int32 (range checked), bool
    as uint8; float64 as float32 only for constants (never for graph inputs)."""
    if array.dtype == np.bool_:
        return array.astype(np.uint8)
    if array.dtype in (np.int64, np.uint32, np.uint64, np.int16, np.uint16):
        info = np.iinfo(np.int32)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise UnsupportedNode(f"{what} holds integers outside int32's range, and tilecraft "
                                  "has no 64-bit integers")
        return array.astype(np.int32)
    if array.dtype == np.float64:
        return array.astype(np.float32)
    return array


def ints(value: np.ndarray | Any) -> list[int]:
    """A known integer array (shape, axes, pads) as Python ints."""
    return [int(v) for v in np.asarray(value).reshape(-1)]


def attributes(node: Any) -> dict[str, Any]:
    """A node's attributes as Python values (ints, floats, strings, lists, numpy arrays)."""
    from onnx import helper, numpy_helper

    result: dict[str, Any] = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode() for v in value]
        elif hasattr(value, "raw_data") or hasattr(value, "float_data"):
            value = numpy_helper.to_array(value)
        result[attr.name] = value
    return result
