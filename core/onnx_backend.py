"""tilecraft as an ONNX backend (``onnx.backend.base.Backend``), so ONNX's own backend test suite
(``onnx.backend.test``) checks the importer and the compiler.

``TilecraftBackend.prepare(model, device="CPU", target=None)`` imports the model
(:func:`tilecraft.from_onnx`) and compiles it for ``target`` (default: the best installed target
this machine executes, as the command line picks it). Inputs that the import needs as values
(a Reshape's shape given as a graph input, Gather's indices) are bound when the first call
brings them; the model is compiled again for other values. int64 / bool values are computed as
int32 / uint8 (tilecraft's types) and handed back in the model's types.

>>> from tilecraft.onnx_backend import TilecraftBackend
>>> TilecraftBackend.supports_device("CPU"), TilecraftBackend.supports_device("CUDA")
(True, False)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep

from tilecraft.errors import TargetError
from tilecraft.onnx.loader import from_onnx, load_model
from tilecraft.onnx.values import ConstantRequired, narrow
from tilecraft.target.base import Target

#: the numpy dtype of each ONNX element type handed back
_ONNX_NUMPY = {1: np.float32, 10: np.float16, 3: np.int8, 2: np.uint8, 6: np.int32,
               7: np.int64, 9: np.bool_}


def host_target() -> Target:
    """The best installed target this machine executes (the CLI's default)."""
    from tilecraft.cli_target import choose_host_target
    from tilecraft.target.registry import list_targets

    return choose_host_target(list_targets()).target


class TilecraftRep(BackendRep):
    """A prepared model: compiled on first run (again when a bound input's value changes)."""

    def __init__(self, model: Any, target: Target | str, initializers: str = "constants"):
        self.model = model
        self.target = target
        self.initializers = initializers
        self.bound: set[str] = set()  # graph inputs the import needs as values
        self._compiled: dict[bytes, Any] = {}
        graph = model.graph
        inits = {i.name for i in graph.initializer}
        self.input_names = [i.name for i in graph.input if i.name not in inits]
        self.outputs = list(graph.output)

    def _key(self, values: Mapping[str, np.ndarray]) -> bytes:
        return b"|".join(name.encode() + b"=" + values[name].tobytes() + str(
            values[name].shape).encode() for name in sorted(self.bound))

    def _executable(self, values: Mapping[str, np.ndarray]) -> Any:
        import tilecraft as tc

        while True:
            key = self._key(values)
            if key in self._compiled:
                return self._compiled[key]
            try:
                graph = from_onnx(self.model, initializers=self.initializers,
                                  input_values={n: values[n] for n in self.bound},
                                  input_shapes={n: v.shape for n, v in values.items()})
            except ConstantRequired as needed:
                if needed.input_name not in values or needed.input_name in self.bound:
                    raise
                self.bound.add(needed.input_name)
                continue
            exe = tc.compile(graph, target=self.target)
            self._compiled[key] = exe
            return exe

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, Mapping):
            given = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            given = dict(zip(self.input_names, inputs))
        values = {name: np.asarray(array) for name, array in given.items()}
        exe = self._executable(values)
        feeds = {t.name: _scalar_as_one(narrow(values[_onnx_name(t.name, self.input_names)],
                                               f"input {t.name!r}"), t.shape)
                 for t in exe.graph.inputs}
        results = exe(**feeds)
        if not isinstance(results, tuple):
            results = (results,)
        return tuple(_as_onnx(r, info) for r, info in zip(results, self.outputs))


def _scalar_as_one(array: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """A 0-d array (an ONNX scalar input) as the one-element tensor tilecraft imported it as;
    any other array unchanged (a wrong shape is the Executable's to report)."""
    return array.reshape(tuple(shape)) if array.ndim == 0 and tuple(shape) == (1,) else array


def _onnx_name(tensor_name: str, onnx_names: Sequence[str]) -> str:
    from tilecraft.onnx.context import safe_name

    for name in onnx_names:
        if name == tensor_name or safe_name(name) == tensor_name:
            return name
    return tensor_name


def _as_onnx(array: np.ndarray, info: Any) -> np.ndarray:
    """A result in the ONNX output's element type and (when declared) shape."""
    tensor_type = info.type.tensor_type
    dtype = _ONNX_NUMPY.get(tensor_type.elem_type)
    if dtype is not None and array.dtype != dtype:
        array = array.astype(dtype)
    if tensor_type.HasField("shape"):
        dims = tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shape = tuple(int(d.dim_value) for d in dims)
            if shape != array.shape:
                # tilecraft holds an ONNX scalar as one element: the only difference allowed
                if array.size != 1 or int(np.prod(shape)) != 1:
                    raise TargetError(f"output {info.name!r} came out {array.shape}, but the "
                                      f"model declares {shape}")
                array = array.reshape(shape)
    return array


class TilecraftBackend(Backend):
    """``onnx.backend.base.Backend`` for tilecraft; ``target=`` picks the target."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", target: Target | str | None = None,
                initializers: str = "constants", **kwargs: Any) -> TilecraftRep:
        super().prepare(model, device, **kwargs)
        return TilecraftRep(load_model(model), target or host_target(), initializers)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: Any, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, Any]] | None = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        from onnx import helper, numpy_helper

        values = [np.asarray(v) for v in inputs]
        graph_inputs = [helper.make_tensor_value_info(
            name, numpy_helper.from_array(np.zeros(1, v.dtype)).data_type, v.shape)
            for name, v in zip(node.input, values) if name]
        graph_outputs = [helper.make_empty_tensor_value_info(name) for name in node.output]
        model = helper.make_model(helper.make_graph([node], "node", graph_inputs, graph_outputs))
        return cls.run_model(model, values, device, **kwargs)


prepare = TilecraftBackend.prepare
run_model = TilecraftBackend.run_model
run_node = TilecraftBackend.run_node
supports_device = TilecraftBackend.supports_device
