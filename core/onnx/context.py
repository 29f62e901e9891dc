"""The state of one ONNX import, and what a converter sees of the node it converts.

A converter is ``fn(node: NodeContext) -> list[Value]``: it reads inputs (as te tensors with
:meth:`NodeContext.tensor`, or as import-time values with :meth:`NodeContext.const`) and
attributes, and builds its outputs with :mod:`tilecraft.ops`.

>>> safe_name("/encoder/MatMul_output_0")
'encoder_MatMul_output_0'
>>> safe_name("0x")
'v_0x'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilecraft import te
from tilecraft.onnx.values import ConstantRequired, UnsupportedNode, Value, attributes, narrow
from tilecraft.te.tensor import Tensor

Converter = Callable[["NodeContext"], list[Value]]

#: op_type -> converter; filled by the converter modules (tilecraft.onnx.convert_*)
CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str) -> Callable[[Converter], Converter]:
    """Register ``fn`` as the converter of ONNX operators ``op_types`` (default domain)."""

    def register(fn: Converter) -> Converter:
        for op_type in op_types:
            CONVERTERS[op_type] = fn
        return fn

    return register


def safe_name(name: str) -> str:
    """An ONNX value name as a C identifier (tensor names become variable names in kernels)."""
    cleaned = re.sub(r"[^0-9A-Za-z_]+", "_", name).strip("_") or "v"
    return f"v_{cleaned}" if cleaned[0].isdigit() else cleaned


@dataclass
class ImportState:
    """Names in use, and the known values made into constant tensors (``te.constant``)."""

    used_names: set[str] = field(default_factory=set)
    _materialized: dict[int, Tensor] = field(default_factory=dict)
    #: the ONNX element type of each value onnx's shape inference could type (bool and uint8
    #: are both held as uint8: CastLike needs to know which)
    elem_types: dict[str, int] = field(default_factory=dict)

    def unique(self, name: str) -> str:
        base = safe_name(name)
        candidate, n = base, 1
        while candidate in self.used_names:
            candidate, n = f"{base}_{n}", n + 1
        self.used_names.add(candidate)
        return candidate

    def constant_tensor(self, array: np.ndarray, name: str) -> Tensor:
        """The tensor standing for a known value: a ``te.constant`` (made once per array; a
        0-d value as shape (1,), since tensors have at least one dimension)."""
        key = id(array)
        if key not in self._materialized:
            value = narrow(np.asarray(array), f"the constant {name}")
            if value.ndim == 0:
                value = value.reshape(1)
            self._materialized[key] = te.constant(np.ascontiguousarray(value),
                                                  name=self.unique(name))
        return self._materialized[key]


@dataclass
class NodeContext:
    """One ONNX node being converted: its inputs (``None`` for an omitted optional input),
    attributes, the operator version in force, and names for its outputs."""

    node: Any
    inputs: list[Value | None]
    version: int
    state: ImportState
    attrs: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.attrs = attributes(self.node)

    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def label(self) -> str:
        return f"{self.node.op_type} node {self.node.name or self.node.output[0]!r}"

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def has(self, index: int) -> bool:
        return index < len(self.inputs) and self.inputs[index] is not None

    def value(self, index: int) -> Value:
        if not self.has(index):
            raise UnsupportedNode(f"{self.label}: input {index} is missing")
        value = self.inputs[index]
        assert value is not None
        return value

    def is_const(self, index: int) -> bool:
        return self.has(index) and isinstance(self.inputs[index], np.ndarray)

    def const(self, index: int, what: str) -> np.ndarray:
        """Input ``index``'s value at import time; ConstantRequired when it is computed."""
        value = self.value(index)
        if not isinstance(value, np.ndarray):
            name = self.node.input[index]
            raise ConstantRequired(f"{self.label}: its {what} (input {name!r}) must be known "
                                   "when the model is imported (an initializer or a constant "
                                   "expression), not computed at run time", name)
        return value

    def tensor(self, index: int) -> Tensor:
        """Input ``index`` as a te tensor (a known value becomes a bound constant tensor)."""
        value = self.value(index)
        if isinstance(value, np.ndarray):
            return self.state.constant_tensor(value, self.node.input[index])
        return value

    def out(self, index: int = 0) -> str:
        """The tensor name for output ``index`` (the ONNX name, made a unique identifier)."""
        return self.state.unique(self.node.output[index])

    def unsupported(self, why: str) -> UnsupportedNode:
        return UnsupportedNode(f"{self.label}: {why}")
