"""Micro-kernel declarations (thesis §3.4.1.2): an abstract micro-kernel states its semantics
in the intrinsic notation, its operands, the Jinja template of the target's implementation,
and the parameters the target solves for (e.g. the register blocking of Eq. 3.4).

Loop extents and operand shapes may name a parameter instead of a number; ``instantiate``
resolves them into a concrete :class:`~tilecraft.target.intrinsic.ComputeAbstraction`.
Rendering the template is the code generator's business; this module only declares.

>>> gemm = MicroKernelDecl(
...     name="gemm_register_tile",
...     loops=[{"name": "m", "extent": "MI", "kind": "spatial"},
...            {"name": "n", "extent": "NI", "kind": "spatial"},
...            {"name": "k", "extent": "KI", "kind": "reduce"}],
...     operands=[{"name": "A", "role": "src", "dtype": "float32", "shape": ["MI", "KI"],
...                "index": ["m", "k"]},
...               {"name": "B", "role": "src", "dtype": "float32", "shape": ["KI", "NI"],
...                "index": ["k", "n"]},
...               {"name": "C", "role": "dst", "dtype": "float32", "shape": ["MI", "NI"],
...                "index": ["m", "n"]}],
...     semantics="C[m, n] += A[m, k] * B[k, n]",
...     template="templates/gemm_register_tile.ll.jinja",
...     parameters={"MI": {"default": 6, "maximum": 14},
...                 "NI": {"default": 32, "choices": [16, 32, 48, 64]},
...                 "KI": {"default": 1}})
>>> gemm.resolve({"MI": 4})
{'MI': 4, 'NI': 32, 'KI': 1}
>>> [op.shape for op in gemm.instantiate(MI=4, KI=8).operands]
[(4, 8), (8, 32), (4, 32)]
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from tilecraft.dtypes import DType
from tilecraft.errors import PluginError, TargetError
from tilecraft.target.intrinsic import ComputeAbstraction, OperandRole
from tilecraft.target.semantics import IntrinsicProgram
from tilecraft.target.specmodel import Lax, Seq, SpecModel, check_identifier, check_unique
from tilecraft.te.expr import AxisKind


class MicroKernelParameter(SpecModel):
    """An integer the target chooses per use of the micro-kernel (a blocking factor)."""

    default: int = Field(ge=1)
    choices: Seq[int] = Field(default=(), description="allowed values; empty means a range")
    minimum: int = Field(default=1, ge=1)
    maximum: int | None = Field(default=None, ge=1)
    description: str = ""

    @model_validator(mode="after")
    def _default_allowed(self) -> MicroKernelParameter:
        problem = self.problem(self.default)
        if problem:
            raise ValueError(f"default {problem}")
        return self

    def problem(self, value: int) -> str | None:
        """Why ``value`` is not allowed, or None."""
        if self.choices and value not in self.choices:
            return f"{value} is not one of the choices {list(self.choices)}"
        if value < self.minimum:
            return f"{value} is below the minimum {self.minimum}"
        if self.maximum is not None and value > self.maximum:
            return f"{value} is above the maximum {self.maximum}"
        return None


class MicroKernelLoop(SpecModel):
    name: str
    extent: int | str = Field(description="a number, or the name of a parameter")
    kind: Lax[AxisKind]


class MicroKernelOperand(SpecModel):
    name: str
    role: Lax[OperandRole]
    dtype: Lax[DType]
    shape: Seq[int | str] = Field(min_length=1)
    index: Seq[str] = Field(min_length=1)


class MicroKernelDecl(SpecModel):
    """A micro-kernel: semantics, operands, implementation template and its parameters."""

    name: str
    description: str = ""
    loops: Seq[MicroKernelLoop] = Field(min_length=1)
    operands: Seq[MicroKernelOperand] = Field(min_length=1)
    semantics: str
    template: str = Field(description="package-relative path of the Jinja template, "
                                      "with forward slashes")
    parameters: dict[str, MicroKernelParameter] = Field(default_factory=dict,
                                                        validate_default=True)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_identifier(value, "micro-kernel name")

    @field_validator("template")
    @classmethod
    def _relative_template(cls, value: str) -> str:
        path = PurePosixPath(value)
        if not value or path.is_absolute() or ".." in path.parts or "\\" in value:
            raise ValueError(f"template {value!r} must be a relative path inside the plugin "
                             "package, with forward slashes and no '..'")
        return value

    @field_validator("parameters")
    @classmethod
    def _parameters_used(cls, value: dict[str, MicroKernelParameter],
                         info: ValidationInfo) -> dict[str, MicroKernelParameter]:
        for name in value:
            check_identifier(name, "parameter name")
        symbolic = [extent for loop in info.data.get("loops", ()) for extent in (loop.extent,)]
        symbolic += [extent for op in info.data.get("operands", ()) for extent in op.shape]
        for extent in symbolic:
            if isinstance(extent, str) and extent not in value:
                raise ValueError(f"extent {extent!r} names no declared parameter "
                                 f"(parameters: {', '.join(value) or 'none'})")
        return value

    @model_validator(mode="after")
    def _instantiates(self) -> MicroKernelDecl:
        check_unique([loop.name for loop in self.loops], "loop")
        try:
            self.instantiate()
        except PluginError as err:
            defaults = ", ".join(f"{k}={p.default}" for k, p in self.parameters.items())
            problems = "; ".join(line.strip() for line in str(err).splitlines()[1:])
            raise ValueError(f"with the default parameters ({defaults or 'none'}): "
                             f"{problems}") from None
        return self

    def resolve(self, values: Mapping[str, int] | None = None) -> dict[str, int]:
        """Every parameter's value: ``values`` where given, else the default; a
        :class:`TargetError` names a value that is unknown or not allowed."""
        values = dict(values or {})
        for name in values:
            if name not in self.parameters:
                raise TargetError(f"micro-kernel {self.name} has no parameter {name!r} "
                                  f"(parameters: {', '.join(self.parameters) or 'none'})")
        resolved = {}
        for name, parameter in self.parameters.items():
            value = values.get(name, parameter.default)
            problem = parameter.problem(value) if isinstance(value, int) else "is not an int"
            if problem:
                raise TargetError(f"micro-kernel {self.name}: parameter {name} = {problem}")
            resolved[name] = value
        return resolved

    def instantiate(self, **values: int) -> ComputeAbstraction:
        """The compute abstraction for concrete parameter values (defaults for the rest)."""
        resolved = self.resolve(values)

        def extent(value: int | str) -> int:
            return resolved[value] if isinstance(value, str) else value

        return ComputeAbstraction(
            loops=[{"name": loop.name, "extent": extent(loop.extent), "kind": loop.kind}
                   for loop in self.loops],
            operands=[{"name": op.name, "role": op.role, "dtype": op.dtype,
                       "shape": tuple(extent(e) for e in op.shape), "index": op.index}
                      for op in self.operands],
            semantics=self.semantics)

    def to_te(self, **values: int) -> IntrinsicProgram:
        """The semantics as a te program for parameter values ``values`` (defaults for the
        rest)."""
        return self.instantiate(**values).to_te()

    def reference(self, *operands: np.ndarray, **params: int) -> None:
        """The semantics for parameter values ``params`` on numpy operand views, in place:
        the form the Kernel IR interpreter calls. An operand may carry extra leading
        dimensions of extent 1 (a tile of a batched buffer); they are dropped (a view, so the
        destination is still written in place)."""
        views = []
        for array, declared in zip(operands, self.operands):
            extra = array.ndim - len(declared.shape)
            if extra > 0 and all(e == 1 for e in array.shape[:extra]):
                array = array.reshape(array.shape[extra:])
            views.append(array)
        self.instantiate(**params).apply(*views)
