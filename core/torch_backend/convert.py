"""An ATen FX graph (what ``make_fx`` with the core ATen decompositions gives for a dynamo
graph) as a tilecraft Graph, through :mod:`tilecraft.ops`.

:func:`convert` returns the Graph, the names of its inputs per FX placeholder and where each
FX output comes from — or raises :class:`UnsupportedGraph` listing every node it cannot convert
at once (node, target, reason), as the ONNX importer does.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilecraft import ops, te
from tilecraft.errors import TilecraftError
from tilecraft.graph import Graph
from tilecraft.ops.building import broadcast_index, broadcast_shape, named_compute
from tilecraft.ops.elementwise import axis_names, map_unary
from tilecraft.te.tensor import Tensor

__all__ = ["ConvertedGraph", "UnsupportedGraph", "convert", "supported_targets"]

_DTYPES = {"torch.float32": "float32", "torch.float64": "float64", "torch.int32": "int32",
           "torch.int64": "int64", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}


class UnsupportedGraph(TilecraftError):
    """Nodes of the FX graph tilecraft cannot convert; ``problems`` lists (node, target,
    reason) for every one."""

    def __init__(self, problems: Sequence[tuple[str, str, str]]):
        self.problems = list(problems)
        lines = "; ".join(f"{node} ({target}): {reason}" for node, target, reason in problems)
        super().__init__(f"{len(self.problems)} FX node(s) not supported by tilecraft: {lines}")


class _Unsupported(Exception):
    """One node cannot be converted (the reason)."""


class _Downstream(_Unsupported):
    """A node reads one that was not converted (not a problem of its own)."""


@dataclass
class ConvertedGraph:
    """The Graph, its input name per FX placeholder (``None``: the graph does not read it),
    and per FX output the index of the graph output giving it (``None``: not a tensor)."""

    graph: Graph
    input_names: list[str | None]
    output_slots: list[int | None]
    #: each FX output's shape (a 0-d tensor is computed as shape (1,))
    output_shapes: list[tuple[int, ...] | None]


def _shape(node: Any) -> tuple[int, ...]:
    value = node.meta.get("val")
    if value is None or not hasattr(value, "shape"):
        raise _Unsupported("no shape known for it (the graph was not traced with shapes)")
    try:
        return tuple(int(s) for s in value.shape)
    except TypeError:
        raise _Unsupported(f"dynamic shape {tuple(value.shape)}: compile with "
                           "dynamic=False") from None


def _name(node: Any) -> str:
    return f"fx_{node.name}"


def _broadcast(values: Sequence[Any], fn: Callable[..., te.Expr], name: str) -> Tensor:
    tensors = [v for v in values if isinstance(v, Tensor)]
    shape: tuple[int, ...] = ()
    for t in tensors:
        shape = broadcast_shape(shape, t.shape, name)
    dtype = tensors[0].dtype

    def body(*axes: te.Expr) -> te.Expr:
        args = [v[broadcast_index(v, axes)] if isinstance(v, Tensor) else v for v in values]
        return te.as_expr(fn(*args)).astype(dtype)

    return named_compute(shape or (1,), axis_names(len(shape) or 1), body, name)


def _reshape(x: Tensor, shape: tuple[int, ...], name: str) -> Tensor:
    if tuple(x.shape) == shape:
        return x
    return ops.reshape(x, shape or (1,), name=name)


def _window(x: Tensor, dim: int, start: int, length: int, step: int, name: str) -> Tensor:
    shape = list(x.shape)
    shape[dim] = length

    def body(*idx: te.Expr) -> te.Expr:
        return x[tuple(start + step * i if d == dim else i for d, i in enumerate(idx))]

    return named_compute(tuple(shape), axis_names(len(shape)), body, name)


def _expand(x: Tensor, shape: tuple[int, ...], name: str) -> Tensor:
    if tuple(x.shape) == shape:
        return x
    offset = len(shape) - x.ndim

    def body(*idx: te.Expr) -> te.Expr:
        return x[tuple(0 if e == 1 and shape[offset + d] != 1 else idx[offset + d]
                       for d, e in enumerate(x.shape))]

    return named_compute(shape, axis_names(len(shape)), body, name)


class _Converter:
    """Converts node by node; each rule returns a Tensor, a number or a tuple of them."""

    def __init__(self) -> None:
        self.values: dict[Any, Any] = {}
        self.rules: dict[str, Callable[[Any, tuple, dict], Any]] = {}
        self._register()

    def arg(self, value: Any) -> Any:
        """An FX argument with nodes replaced by what they converted to."""
        from torch.fx import Node

        if isinstance(value, Node):
            converted = self.values.get(value)
            if converted is None:
                raise _Downstream(f"reads {value.name}, which was not converted")
            return converted
        if isinstance(value, (list, tuple)):
            return type(value)(self.arg(v) for v in value)
        return value

    def tensor(self, value: Any) -> Tensor:
        if not isinstance(value, Tensor):
            raise _Unsupported(f"expected a tensor operand, got {type(value).__name__}")
        return value

    # the rules ---------------------------------------------------------------------------------
    def _register(self) -> None:
        rules = self.rules

        def rule(*names: str) -> Callable[[Callable], Callable]:
            def register(fn: Callable) -> Callable:
                for n in names:
                    rules[n] = fn
                return fn
            return register

        def binary(fn: Callable[[Any, Any], Any]) -> Callable:
            def convert(node: Any, args: tuple, kwargs: dict) -> Any:
                a, b = args[0], args[1]
                alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
                if alpha != 1:
                    b = b * alpha if not isinstance(b, Tensor) else ops.scale(
                        b, float(alpha), name=_name(node) + "_alpha")
                if not isinstance(a, Tensor) and not isinstance(b, Tensor):
                    return fn(a, b)
                return _broadcast([a, b], fn, _name(node))
            return convert

        for names, fn in ((("aten.add.Tensor", "aten.add.Scalar"), operator.add),
                          (("aten.sub.Tensor", "aten.sub.Scalar"), operator.sub),
                          (("aten.mul.Tensor", "aten.mul.Scalar"), operator.mul),
                          (("aten.div.Tensor", "aten.div.Scalar"), operator.truediv),
                          (("aten.maximum.default",), te.max),
                          (("aten.minimum.default",), te.min)):
            rule(*names)(binary(fn))

        unary = {"aten.relu.default": lambda v: te.max(v, 0.0),
                 "aten.sigmoid.default": lambda v: 1.0 / (1.0 + te.exp(-v)),
                 "aten.tanh.default": te.tanh, "aten.exp.default": te.exp,
                 "aten.sqrt.default": te.sqrt, "aten.rsqrt.default": lambda v: 1.0 / te.sqrt(v),
                 "aten.neg.default": lambda v: -v, "aten.erf.default": te.erf,
                 "aten.abs.default": te.abs if hasattr(te, "abs") else None}
        for target, fn in unary.items():
            if fn is not None:
                rule(target)(lambda node, args, kwargs, fn=fn: map_unary(
                    self.tensor(args[0]), fn, "unary", _name(node)))

        @rule("aten.gelu.default")
        def gelu(node: Any, args: tuple, kwargs: dict) -> Tensor:
            approximate = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
            if approximate != "none":
                raise _Unsupported(f"gelu(approximate={approximate!r}): only the exact form")
            return ops.gelu(self.tensor(args[0]), name=_name(node))

        @rule("aten.hardtanh.default", "aten.clamp.default")
        def clamp(node: Any, args: tuple, kwargs: dict) -> Tensor:
            low = args[1] if len(args) > 1 else kwargs.get("min")
            high = args[2] if len(args) > 2 else kwargs.get("max")
            if node.target.__name__.startswith("hardtanh"):
                low, high = (-1.0 if low is None else low), (1.0 if high is None else high)

            def clip(v: te.Expr) -> te.Expr:
                out = v if low is None else te.max(v, float(low))
                return out if high is None else te.min(out, float(high))
            return map_unary(self.tensor(args[0]), clip, "clamp", _name(node))

        @rule("aten.mm.default")
        def mm(node: Any, args: tuple, kwargs: dict) -> Tensor:
            return ops.matmul(self.tensor(args[0]), self.tensor(args[1]), name=_name(node))

        @rule("aten.bmm.default")
        def bmm(node: Any, args: tuple, kwargs: dict) -> Tensor:
            return ops.batch_matmul(self.tensor(args[0]), self.tensor(args[1]),
                                    name=_name(node))

        @rule("aten.addmm.default")
        def addmm(node: Any, args: tuple, kwargs: dict) -> Tensor:
            beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
            product = ops.matmul(self.tensor(args[1]), self.tensor(args[2]),
                                 name=_name(node) + "_mm")
            bias = self.tensor(args[0])
            return _broadcast([product, bias], lambda p, c: p * alpha + c * beta
                              if (alpha, beta) != (1, 1) else p + c, _name(node))

        @rule("aten.t.default")
        def t(node: Any, args: tuple, kwargs: dict) -> Tensor:
            x = self.tensor(args[0])
            return x if x.ndim < 2 else ops.transpose(x, (1, 0), name=_name(node))

        @rule("aten.permute.default")
        def permute(node: Any, args: tuple, kwargs: dict) -> Tensor:
            x = self.tensor(args[0])
            perm = tuple(int(d) % x.ndim for d in args[1])
            if perm == tuple(range(x.ndim)):
                return x
            return ops.transpose(x, perm, name=_name(node))

        @rule("aten.transpose.int")
        def transpose(node: Any, args: tuple, kwargs: dict) -> Tensor:
            x = self.tensor(args[0])
            perm = list(range(x.ndim))
            a, b = int(args[1]) % x.ndim, int(args[2]) % x.ndim
            perm[a], perm[b] = perm[b], perm[a]
            return ops.transpose(x, tuple(perm), name=_name(node))

        @rule("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
              "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
              "aten.squeeze.default", "aten.flatten.using_ints")
        def view(node: Any, args: tuple, kwargs: dict) -> Tensor:
            return _reshape(self.tensor(args[0]), _shape(node), _name(node))

        @rule("aten.expand.default")
        def expand(node: Any, args: tuple, kwargs: dict) -> Tensor:
            return _expand(self.tensor(args[0]), _shape(node), _name(node))

        @rule("aten.clone.default", "aten.alias.default", "aten.detach.default",
              "aten.lift_fresh_copy.default", "aten.contiguous.default")
        def identity(node: Any, args: tuple, kwargs: dict) -> Tensor:
            return self.tensor(args[0])

        @rule("aten._to_copy.default")
        def to_copy(node: Any, args: tuple, kwargs: dict) -> Tensor:
            x = self.tensor(args[0])
            dtype = _DTYPES.get(str(node.meta["val"].dtype))
            if dtype is None:
                raise _Unsupported(f"cast to {node.meta['val'].dtype}")
            return x if x.dtype.value == dtype else ops.cast(x, dtype, name=_name(node))

        @rule("aten._softmax.default", "aten._log_softmax.default")
        def softmax(node: Any, args: tuple, kwargs: dict) -> Tensor:
            fn = ops.softmax if "_softmax" in str(node.target) and "log" not in \
                str(node.target) else ops.log_softmax
            return fn(self.tensor(args[0]), axis=int(args[1]), name=_name(node))

        @rule("aten.native_layer_norm.default")
        def layer_norm(node: Any, args: tuple, kwargs: dict) -> tuple:
            x = self.tensor(args[0])
            axes = tuple(range(x.ndim - len(args[1]), x.ndim))
            weight, bias = args[2], args[3]
            out = ops.layer_norm(x, weight, bias, axes=axes, eps=float(args[4]),
                                 name=_name(node))
            return (out, None, None)

        def batch_norm(node: Any, x: Any, weight: Any, bias: Any, mean: Any, var: Any,
                       eps: float) -> tuple:
            if not isinstance(mean, Tensor) or not isinstance(var, Tensor):
                raise _Unsupported("batch norm without running statistics (training mode)")
            out = ops.batch_norm(self.tensor(x), mean, var, weight, bias, eps=float(eps),
                                 axis=1, name=_name(node))
            return (out, None, None)

        @rule("aten._native_batch_norm_legit_no_training.default")
        def bn_inference(node: Any, args: tuple, kwargs: dict) -> tuple:
            return batch_norm(node, args[0], args[1], args[2], args[3], args[4], args[6])

        @rule("aten.native_batch_norm.default")
        def bn(node: Any, args: tuple, kwargs: dict) -> tuple:
            if args[5]:
                raise _Unsupported("batch norm in training mode (model.eval() first)")
            return batch_norm(node, args[0], args[1], args[2], args[3], args[4], args[7])

        @rule("aten.convolution.default")
        def convolution(node: Any, args: tuple, kwargs: dict) -> Tensor:
            x, w, bias, stride, padding, dilation, transposed, _, groups = args[:9]
            x, w = self.tensor(x), self.tensor(w)
            if transposed:
                raise _Unsupported("transposed convolution")
            if x.ndim != 4:
                raise _Unsupported(f"{x.ndim - 2}-d convolution (2-d only)")
            y = ops.conv2d(x, w, stride=tuple(stride), padding=tuple(padding),
                           dilation=tuple(dilation), groups=int(groups),
                           name=_name(node) + ("_conv" if bias is not None else ""))
            if bias is None:
                return y
            return ops.bias_add(y, self.tensor(bias), axis=1, name=_name(node))

        @rule("aten.max_pool2d_with_indices.default")
        def max_pool(node: Any, args: tuple, kwargs: dict) -> tuple:
            x, kernel = self.tensor(args[0]), tuple(args[1])
            stride = tuple(args[2]) if len(args) > 2 and args[2] else kernel
            padding = tuple(args[3]) if len(args) > 3 else (0, 0)
            dilation = tuple(args[4]) if len(args) > 4 else (1, 1)
            ceil = bool(args[5]) if len(args) > 5 else False
            if set(dilation) != {1} or ceil:
                raise _Unsupported("max pooling with dilation or ceil_mode")
            return (ops.max_pool2d(x, kernel, stride, padding, name=_name(node)), None)

        @rule("aten.avg_pool2d.default")
        def avg_pool(node: Any, args: tuple, kwargs: dict) -> Tensor:
            x, kernel = self.tensor(args[0]), tuple(args[1])
            stride = tuple(args[2]) if len(args) > 2 and args[2] else kernel
            padding = tuple(args[3]) if len(args) > 3 else (0, 0)
            if any(padding) or (len(args) > 4 and args[4]) or (len(args) > 6 and args[6]):
                raise _Unsupported("average pooling with padding, ceil_mode or a divisor")
            return ops.avg_pool2d(x, kernel, stride, name=_name(node))

        def reduce(fn: Callable) -> Callable:
            def convert(node: Any, args: tuple, kwargs: dict) -> Tensor:
                x = self.tensor(args[0])
                dims = args[1] if len(args) > 1 else kwargs.get("dim")
                keep = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
                axes = None if dims is None else tuple(int(d) % x.ndim for d in (
                    [dims] if isinstance(dims, int) else dims))
                return fn(x, axes=axes, keepdims=keep, name=_name(node))
            return convert

        rule("aten.mean.dim")(reduce(ops.mean))
        rule("aten.sum.dim_IntList")(reduce(ops.reduce_sum))
        rule("aten.amax.default")(reduce(ops.reduce_max))

        @rule("aten.cat.default")
        def cat(node: Any, args: tuple, kwargs: dict) -> Tensor:
            tensors = [self.tensor(t) for t in args[0]]
            dim = int(args[1] if len(args) > 1 else kwargs.get("dim", 0)) % tensors[0].ndim
            return ops.concat(tensors, axis=dim, name=_name(node))

        @rule("aten.split_with_sizes.default", "aten.split.Tensor")
        def split(node: Any, args: tuple, kwargs: dict) -> tuple:
            x = self.tensor(args[0])
            dim = int(args[2] if len(args) > 2 else kwargs.get("dim", 0)) % x.ndim
            pieces = [int(v.shape[dim]) for v in node.meta["val"]]
            out, start = [], 0
            for index, length in enumerate(pieces):
                out.append(_window(x, dim, start, length, 1, f"{_name(node)}_{index}"))
                start += length
            return tuple(out)

        @rule("aten.slice.Tensor")
        def slice_(node: Any, args: tuple, kwargs: dict) -> Tensor:
            x = self.tensor(args[0])
            dim = int(args[1] if len(args) > 1 else 0) % x.ndim
            start = args[2] if len(args) > 2 and args[2] is not None else 0
            step = int(args[4]) if len(args) > 4 else 1
            start = int(start) + (x.shape[dim] if start < 0 else 0)
            start = max(0, min(start, x.shape[dim]))
            length = _shape(node)[dim]
            if length == x.shape[dim] and step == 1:
                return x
            return _window(x, dim, start, length, step, _name(node))

        @rule("<built-in function getitem>")
        def getitem(node: Any, args: tuple, kwargs: dict) -> Any:
            value = args[0][args[1]]
            if value is None:
                raise _Unsupported("reads an output tilecraft does not compute (e.g. the "
                                   "saved statistics of a normalisation, pooling indices)")
            return value

    def convert_node(self, node: Any) -> Any:
        key = str(node.target)
        rule = self.rules.get(key)
        if rule is None:
            raise _Unsupported("no converter for this operator")
        return rule(node, self.arg(node.args), self.arg(dict(node.kwargs)))


def convert(gm: Any, example_inputs: Sequence[Any],
            constants: Collection[int] = ()) -> ConvertedGraph:
    """``gm`` (an ATen-level ``torch.fx.GraphModule`` with shapes in ``node.meta["val"]``) as
    a tilecraft Graph; :class:`UnsupportedGraph` lists every node it cannot convert. The FX
    placeholders at the positions in ``constants`` (a module's parameters and buffers) become
    ``te.constant`` tensors bound to a copy of their example's value (their input name is
    ``None``: calls do not pass them), so the graph passes fold them at compile time."""
    converter = _Converter()
    problems: list[tuple[str, str, str]] = []
    input_names: list[str | None] = []
    output_nodes: list[Any] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            index = len(input_names)
            value = example_inputs[index] if index < len(example_inputs) else None
            dtype = _DTYPES.get(str(getattr(value, "dtype", None)))
            if dtype is None or not hasattr(value, "shape"):
                input_names.append(None)
                if node.users:
                    problems.append((node.name, "input", f"input of type "
                                     f"{getattr(value, 'dtype', type(value).__name__)}"))
                continue
            shape = tuple(int(s) for s in value.shape) or (1,)
            if index in constants:
                held = value.detach().cpu()
                if dtype == "bfloat16":  # numpy has no bfloat16: through float32, exactly
                    held = held.float()
                array = np.array(held.numpy(), copy=True).reshape(shape)
                converter.values[node] = te.constant(array, dtype, name=f"const{index}")
                input_names.append(None)
                continue
            name = f"arg{index}"
            converter.values[node] = te.placeholder(shape, dtype, name=name)
            input_names.append(name)
        elif node.op == "call_function":
            if not node.users:
                continue  # unused (e.g. an empty() for an output nobody reads)
            try:
                converter.values[node] = converter.convert_node(node)
            except _Downstream:
                continue  # its cause is listed
            except _Unsupported as why:
                problems.append((node.name, str(node.target), str(why)))
            except TilecraftError as err:
                problems.append((node.name, str(node.target), f"tilecraft: {err}"))
        elif node.op == "output":
            output_nodes = list(node.args[0]) if isinstance(node.args[0], (list, tuple)) \
                else [node.args[0]]
        else:
            problems.append((node.name, node.op, f"FX {node.op} nodes are not converted"))
    if problems:
        raise UnsupportedGraph(problems)
    outputs: list[Tensor] = []
    slots: list[int | None] = []
    shapes: list[tuple[int, ...] | None] = []
    for out in output_nodes:
        value = converter.values.get(out) if out is not None else None
        if not isinstance(value, Tensor):
            slots.append(None)
            shapes.append(None)
            continue
        shapes.append(tuple(int(s) for s in out.meta["val"].shape) if "val" in out.meta
                      else tuple(value.shape))
        if value not in outputs:
            outputs.append(value)
        slots.append(outputs.index(value))
    if not outputs:
        raise UnsupportedGraph([("output", "output", "the graph returns no tensor")])
    if any(math.prod(t.shape) == 0 for t in outputs):
        raise UnsupportedGraph([("output", "output", "an empty output tensor")])
    return ConvertedGraph(Graph.from_outputs(outputs), input_names, slots, shapes)


def supported_targets() -> list[str]:
    """The ATen operators the converter handles (``str(node.target)`` spelling)."""
    return sorted(_Converter().rules)
