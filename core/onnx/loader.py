"""``from_onnx``: an ONNX model (a file path or a ModelProto) as a tilecraft Graph.

Graph inputs keep the ONNX input names (made C identifiers where they are not); initializers
become constant tensors (``initializers="constants"``, the default) or graph inputs
(``"inputs"``). Nodes whose inputs are all known at import time are evaluated there by onnx's
own reference evaluator (shape arithmetic such as Shape -> Gather -> Concat -> Reshape). Every
node whose operator, attribute value or input kind is not supported is listed in one
:class:`~tilecraft.onnx.values.OnnxImportError`.

>>> from onnx import TensorProto, helper
>>> node = helper.make_node("Relu", ["x"], ["y"])
>>> model = helper.make_model(helper.make_graph(
...     [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]))
>>> print(from_onnx(model))
graph(x: float32[2, 3]) -> (y):
  y[i0, i1] = max(x[i0, i1], 0.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from typing import Any

import numpy as np

from tilecraft import te
from tilecraft.graph import Graph
from tilecraft.onnx import (  # noqa: F401 (registers the converters)
    convert_attention,
    convert_bitwise,
    convert_indexing,
    convert_integer_ops,
    convert_linalg,
    convert_loss,
    convert_math,
    convert_nn,
    convert_norm,
    convert_quantize,
    convert_recurrent,
    convert_reduce,
    convert_resize,
    convert_selection,
    convert_shape,
    convert_spectral,
    convert_transformer_ops,
)
from tilecraft.onnx.context import CONVERTERS, ImportState, NodeContext
from tilecraft.onnx.values import (
    ConstantRequired,
    OnnxImportError,
    UnsupportedNode,
    Value,
    narrow,
    tilecraft_dtype,
)

#: the oldest default-domain opset read (operators are read at the version in force); an older
#: model is converted to it first (:func:`upgraded`)
MIN_OPSET = 13
#: operators whose nodes are evaluated at import time when their inputs are known, whatever
#: they are (they have no run-time converter)
FOLD_ONLY = {"Constant", "ConstantOfShape", "Range", "HannWindow", "HammingWindow",
             "BlackmanWindow", "MelWeightMatrix"}


def load_model(model: Any) -> Any:
    """A ModelProto from a ModelProto, a path or bytes; an OnnxImportError for anything else."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, PathLike)):
        try:
            return onnx.load(str(model))
        except Exception as err:  # protobuf's DecodeError, OSError
            raise OnnxImportError(f"cannot read the ONNX model {str(model)!r}: {err}; give the "
                                  "path of a .onnx file (or an onnx.ModelProto)") from err
    if isinstance(model, bytes):
        try:
            return onnx.load_from_string(model)
        except Exception as err:
            raise OnnxImportError(f"the bytes given are not an ONNX model: {err}") from err
    raise OnnxImportError(f"from_onnx takes a path, bytes or an onnx.ModelProto, got "
                          f"{type(model).__name__}")


def default_opset(model: Any) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise OnnxImportError("the model imports no default-domain (ai.onnx) opset; set "
                          "model.opset_import")


def upgraded(model: Any, opset: int) -> Any:
    """``model`` (written at ``opset``, older than :data:`MIN_OPSET`) converted to
    :data:`MIN_OPSET` by onnx's version converter, whose adapters rewrite the operators whose
    definition changed (Split's sizes and Squeeze's axes becoming inputs, Softmax's axis, ...);
    an OnnxImportError naming the converter's complaint where it cannot.

    >>> from onnx import helper, TensorProto
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    >>> old = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])],
    ...                                           "g", [x], [y]),
    ...                         opset_imports=[helper.make_opsetid("", 11)])
    >>> default_opset(upgraded(old, 11))
    13
    """
    from onnx import version_converter

    unknown = [f"{node.name or node.output[0]!r} ({node.op_type}, opset {opset})"
               for node in model.graph.node
               if node.domain not in ("", "ai.onnx") or _operator_version(node.op_type, opset) < 0]
    if unknown:  # the converter would stop at the first, without naming it
        raise OnnxImportError(f"{len(unknown)} node(s) of the opset {opset} model cannot be "
                              f"converted to opset {MIN_OPSET} (not operators of opset "
                              f"{opset}'s default domain): {', '.join(unknown)}")
    try:
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception as err:  # the converter's C++ errors surface as RuntimeError & co
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise OnnxImportError(
            f"the model uses opset {opset}; tilecraft reads operators as opset {MIN_OPSET} "
            f"and newer define them, and onnx's version converter could not bring it there "
            f"({first}); convert it with onnx.version_converter.convert_version(model, "
            f"{MIN_OPSET}) after fixing that, or export it again at opset {MIN_OPSET} or "
            "newer") from None


def elem_types(model: Any) -> dict[str, int]:
    """The ONNX element type of every value of ``model``'s graph that onnx's shape inference
    (or the model itself) types: inputs, initializers, outputs, intermediates."""
    import onnx

    try:
        typed = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - an untypeable model keeps the types it declares
        typed = model
    graph = typed.graph
    types = {init.name: int(init.data_type) for init in graph.initializer}
    for info in (*graph.input, *graph.value_info, *graph.output):
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
            types[info.name] = int(info.type.tensor_type.elem_type)
    return types


def from_onnx(model: Any, initializers: str = "constants",
              input_values: Mapping[str, np.ndarray] | None = None,
              input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> Graph:
    """The Graph of ``model`` (a path, bytes or ``onnx.ModelProto``).

    ``initializers``: ``"constants"`` (bound constant tensors) or ``"inputs"`` (graph inputs the
    caller passes, named as in the model). ``input_values`` binds graph inputs to values known
    now (they become constants: what a Reshape's shape given as an input needs);
    ``input_shapes`` gives the static shape of inputs whose ONNX shape has symbolic or unknown
    dimensions.
    """
    if initializers not in ("constants", "inputs"):
        raise OnnxImportError(f"initializers={initializers!r}: use 'constants' or 'inputs'")
    proto = load_model(model)
    opset = default_opset(proto)
    if opset < MIN_OPSET:
        proto, opset = upgraded(proto, opset), MIN_OPSET
    graph = proto.graph
    # shape inference copies the model (0.46 s of ResNet-50's 0.56 s import, Xeon family 6
    # model 207): only for the one converter that reads its types
    typed = any(node.op_type == "CastLike" for node in proto.graph.node)
    state = ImportState(elem_types=elem_types(proto) if typed else {})
    env: dict[str, Value] = {}
    values = dict(input_values or {})
    shapes = dict(input_shapes or {})
    _bind_initializers(graph, initializers, state, env)
    for info in graph.input:
        if info.name in env and initializers == "constants":
            continue  # an initializer listed as an input too (older exporters)
        if info.name in values:
            env[info.name] = narrow(np.asarray(values[info.name]), f"input {info.name!r}")
            continue
        env[info.name] = _input_placeholder(info, shapes, state)
    problems = _convert_nodes(graph, opset, state, env)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise OnnxImportError(f"{len(problems)} node(s) of the ONNX graph {graph.name!r} cannot "
                              f"be imported:\n{listed}")
    outputs = []
    for info in graph.output:
        value = env[info.name]
        outputs.append(state.constant_tensor(value, info.name)
                       if isinstance(value, np.ndarray) else value)
    return Graph.from_outputs(outputs)


def _bind_initializers(graph: Any, mode: str, state: ImportState,
                       env: dict[str, Value]) -> None:
    from onnx import numpy_helper

    for init in graph.initializer:
        array = numpy_helper.to_array(init)
        if mode == "constants":
            env[init.name] = array
        else:
            value = narrow(array, f"initializer {init.name!r}")
            env[init.name] = te.placeholder(value.shape or (1,), str(value.dtype),
                                            state.unique(init.name))


def _input_placeholder(info: Any, shapes: Mapping[str, tuple[int, ...]],
                       state: ImportState) -> te.Tensor:
    kind = info.type.WhichOneof("value")
    if kind != "tensor_type":
        raise OnnxImportError(f"graph input {info.name!r} is a {kind}, not a tensor; tilecraft "
                              "imports tensor inputs only")
    tensor_type = info.type.tensor_type
    if info.name in shapes:
        shape = tuple(int(v) for v in shapes[info.name])
    else:
        dims = tensor_type.shape.dim
        if any(not d.HasField("dim_value") or d.dim_value < 1 for d in dims) \
                or not tensor_type.HasField("shape"):
            raise OnnxImportError(f"graph input {info.name!r} has a dynamic or unknown shape "
                                  f"({[d.dim_param or d.dim_value for d in dims]}); pass "
                                  f"input_shapes={{{info.name!r}: (...)}} with its static shape")
        shape = tuple(int(d.dim_value) for d in dims)
    try:
        dtype = tilecraft_dtype(tensor_type.elem_type, f"graph input {info.name!r}")
    except UnsupportedNode as err:
        raise OnnxImportError(str(err)) from None
    return te.placeholder(shape or (1,), dtype, state.unique(info.name))


def _operator_version(op_type: str, opset: int) -> int:
    import onnx.defs

    try:
        return int(onnx.defs.get_schema(op_type, opset).since_version)
    except Exception:  # not an operator of this opset
        return -1


def _convert_nodes(graph: Any, opset: int, state: ImportState,
                   env: dict[str, Value]) -> list[str]:
    """Convert every node in order; the problems, one line per node that cannot be."""
    problems: list[str] = []
    poisoned: set[str] = set()  # values that a failed node would have produced
    for node in graph.node:
        label = f"{node.name or node.output[0]!r} ({node.op_type}, opset {opset})"
        if node.domain not in ("", "ai.onnx"):
            problems.append(f"{label}: operator domain {node.domain!r} is not supported")
            poisoned.update(node.output)
            continue
        if node.op_type == "If" and node.domain in ("", "ai.onnx") \
                and not any(name in poisoned for name in node.input):
            problems += _inline_if(node, label, opset, state, env, poisoned)
            continue
        known = node.op_type in CONVERTERS or node.op_type in FOLD_ONLY
        version = _operator_version(node.op_type, opset)
        if not known or version < 0:
            problems.append(f"{label}: operator {node.op_type} is not supported by tilecraft's "
                            "ONNX import")
            poisoned.update(node.output)
            continue
        if any(name in poisoned for name in node.input):
            poisoned.update(node.output)
            continue
        inputs: list[Value | None] = [env[name] if name else None for name in node.input]
        missing = [n for n, v in zip(node.input, inputs) if n and n not in env]
        if missing:
            problems.append(f"{label}: reads {missing}, which no node or input defines")
            poisoned.update(node.output)
            continue
        try:
            if all(v is None or isinstance(v, np.ndarray) for v in inputs) \
                    and node.op_type != "Shape":
                outputs = _fold(node, inputs, opset)
            else:
                if node.op_type in FOLD_ONLY:
                    unknown = next(n for n, v in zip(node.input, inputs)
                                   if v is not None and not isinstance(v, np.ndarray))
                    raise ConstantRequired(f"{label}: its inputs must be known at import time "
                                           f"(input {unknown!r} is computed at run time): an "
                                           "initializer, a constant expression or a value "
                                           "given in input_values", unknown)
                outputs = CONVERTERS[node.op_type](NodeContext(node, inputs, version, state))
        except ConstantRequired:
            raise
        except UnsupportedNode as err:
            problems.append(f"{label}: {err}")
            poisoned.update(node.output)
            continue
        except OnnxImportError:
            raise
        except Exception as err:  # a shape or dtype error of an op names the node here
            from tilecraft.errors import TilecraftError

            if not isinstance(err, TilecraftError):
                raise
            problems.append(f"{label}: {err}")
            poisoned.update(node.output)
            continue
        for name, value in zip(node.output, outputs):
            if name:
                env[name] = value
    return problems


def _inline_if(node: Any, label: str, opset: int, state: ImportState,
               env: dict[str, Value], poisoned: set[str]) -> list[str]:
    """An If whose condition is known at import time (a shape test, an attribute a function
    body branches on) becomes the nodes of the branch it takes, converted in place (its
    names read the enclosing graph's values, as ONNX scopes them); its outputs are the
    branch's. A condition computed at run time is refused: tilecraft programs have no
    control flow. The problems of the branch's nodes, if any."""
    from onnx import helper

    condition = env.get(node.input[0])
    if not isinstance(condition, np.ndarray) or condition.size != 1:
        poisoned.update(node.output)
        return [f"{label}: its condition {node.input[0]!r} is computed at run time (tilecraft "
                "programs have no control flow: only an If whose condition is known at import "
                "time is imported, as the branch it takes)"]
    branches = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    branch = branches["then_branch" if bool(condition.reshape(-1)[0]) else "else_branch"]
    _bind_initializers(branch, "constants", state, env)
    problems = _convert_nodes(branch, opset, state, env)
    for name, info in zip(node.output, branch.output):
        if not name:
            continue
        if info.name in env and not problems:
            env[name] = env[info.name]
        else:
            poisoned.add(name)
    return problems


def _fold(node: Any, inputs: list[Value | None], opset: int) -> list[np.ndarray]:
    """Evaluate ``node`` on known inputs with onnx's reference evaluator."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [n for n, v in zip(node.input, inputs) if n and v is not None]
    graph = helper.make_graph([node], "fold", [], [helper.make_tensor_value_info(
        out, 0, None) for out in node.output if out])
    for n in names:
        graph.input.append(helper.make_empty_tensor_value_info(n))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        feeds = {n: v for n, v in zip(node.input, inputs) if n and v is not None}
        results = ReferenceEvaluator(model).run(None, feeds)
    except Exception as err:
        raise UnsupportedNode(f"evaluating it on its known inputs failed: {err}") from err
    return [np.asarray(r) for r in results]
