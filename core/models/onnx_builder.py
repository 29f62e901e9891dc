"""The zoo's layers as ONNX nodes, written as exporters write them (MatMul + Add for a
linear layer, Erf for GELU, Clip for ReLU6, LayerNormalization at opset 17), with the weights
as initializers: the same seeded values as :class:`~tilecraft.models.builder.TeBuilder`.
Needs the ``onnx`` extra.

>>> b = OnnxBuilder(seed=0)
>>> y = b.relu(b.dense(b.input("x", (2, 3)), 4, name="fc"), name="act")
>>> model = b.model(y, graph_name="tiny")
>>> [n.op_type for n in model.graph.node]
['MatMul', 'Add', 'Relu']
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tilecraft.models.builder import LayerBuilder

# onnxruntime refuses the IR version newer onnx releases write by default
IR_VERSION = 10


class OnnxBuilder(LayerBuilder):
    """Collects nodes, initializers and each value's shape; :meth:`model` makes the ModelProto."""

    def __init__(self, seed: int = 0):
        super().__init__(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.shapes: dict[str, tuple[int, ...]] = {}

    def _constant(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(value, name))
        self.shapes[name] = tuple(value.shape)
        return name

    def _node(self, op: str, inputs: Sequence[str], name: str, shape: Sequence[int],
              **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attrs))
        self.shapes[name] = tuple(shape)
        return name

    def model(self, output: str, graph_name: str, opset: int = 17) -> onnx.ModelProto:
        """The ModelProto computing ``output``."""
        out = helper.make_tensor_value_info(output, TensorProto.FLOAT, list(self.shapes[output]))
        graph = helper.make_graph(self.nodes, graph_name, self.inputs, [out], self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="tilecraft.models")
        model.ir_version = IR_VERSION
        return model

    def input(self, name: str, shape: Sequence[int]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self.shapes[name] = tuple(shape)
        return name

    def shape_of(self, x: str) -> tuple[int, ...]:
        return self.shapes[x]

    def dense(self, x: str, out_features: int, name: str, bias: bool = True) -> str:
        *lead, in_features = self.shapes[x]
        w = self.weight(f"{name}_w", (out_features, in_features), in_features)
        wt = self._constant(f"{name}_wt", np.ascontiguousarray(w.T))
        shape = (*lead, out_features)
        if not bias:
            return self._node("MatMul", [x, wt], name, shape)
        product = self._node("MatMul", [x, wt], f"{name}_matmul", shape)
        b = self._constant(f"{name}_b", self.weight(f"{name}_b", (out_features,), in_features))
        return self._node("Add", [product, b], name, shape)

    def conv2d(self, x: str, out_channels: int, kernel: int, name: str, stride: int = 1,
               padding: int = 0, groups: int = 1, bias: bool = False) -> str:
        n, in_channels, h, w_ = self.shapes[x]
        fan_in = in_channels // groups * kernel * kernel
        w = self._constant(f"{name}_w", self.weight(
            f"{name}_w", (out_channels, in_channels // groups, kernel, kernel), fan_in))
        inputs = [x, w]
        if bias:
            inputs.append(self._constant(f"{name}_b", self.weight(f"{name}_b", (out_channels,),
                                                                  fan_in)))
        out_h = (h + 2 * padding - kernel) // stride + 1
        out_w = (w_ + 2 * padding - kernel) // stride + 1
        return self._node("Conv", inputs, name, (n, out_channels, out_h, out_w),
                          kernel_shape=[kernel, kernel], strides=[stride, stride],
                          pads=[padding] * 4, group=groups)

    def batch_norm(self, x: str, name: str, eps: float = 1e-5) -> str:
        params = self.batch_norm_params(name, self.shapes[x][1])
        names = [self._constant(f"{name}_{k}", params[k])
                 for k in ("gamma", "beta", "mean", "var")]
        return self._node("BatchNormalization", [x, *names], name, self.shapes[x], epsilon=eps)

    def layer_norm(self, x: str, name: str, eps: float = 1e-5) -> str:
        from tilecraft.models.builder import seeded_positive

        features = self.shapes[x][-1]
        gamma = self._constant(f"{name}_gamma", seeded_positive(self.seed, f"{name}_gamma",
                                                                (features,), 0.5, 1.5))
        beta = self._constant(f"{name}_beta", self.weight(f"{name}_beta", (features,), 9))
        return self._node("LayerNormalization", [x, gamma, beta], name, self.shapes[x], axis=-1,
                          epsilon=eps)

    def relu(self, x: str, name: str) -> str:
        return self._node("Relu", [x], name, self.shapes[x])

    def relu6(self, x: str, name: str) -> str:
        low = self._constant(f"{name}_min", np.array(0.0, np.float32))
        high = self._constant(f"{name}_max", np.array(6.0, np.float32))
        return self._node("Clip", [x, low, high], name, self.shapes[x])

    def gelu(self, x: str, name: str) -> str:
        shape = self.shapes[x]
        root2 = self._constant(f"{name}_sqrt2", np.array(math.sqrt(2.0), np.float32))
        one = self._constant(f"{name}_one", np.array(1.0, np.float32))
        half = self._constant(f"{name}_half", np.array(0.5, np.float32))
        scaled = self._node("Div", [x, root2], f"{name}_div", shape)
        erf = self._node("Erf", [scaled], f"{name}_erf", shape)
        shifted = self._node("Add", [erf, one], f"{name}_add", shape)
        product = self._node("Mul", [x, shifted], f"{name}_mul", shape)
        return self._node("Mul", [product, half], name, shape)

    def add(self, a: str, b: str, name: str) -> str:
        return self._node("Add", [a, b], name, np.broadcast_shapes(self.shapes[a],
                                                                   self.shapes[b]))

    def scale(self, x: str, factor: float, name: str) -> str:
        f = self._constant(f"{name}_factor", np.array(factor, np.float32))
        return self._node("Mul", [x, f], name, self.shapes[x])

    def reshape(self, x: str, shape: Sequence[int], name: str) -> str:
        target = self._constant(f"{name}_shape", np.array(shape, np.int64))
        return self._node("Reshape", [x, target], name, tuple(shape))

    def transpose(self, x: str, perm: Sequence[int], name: str) -> str:
        shape = tuple(self.shapes[x][p] for p in perm)
        return self._node("Transpose", [x], name, shape, perm=list(perm))

    def batch_matmul(self, a: str, b: str, name: str) -> str:
        (batch, m, _), n = self.shapes[a], self.shapes[b][-1]
        return self._node("MatMul", [a, b], name, (batch, m, n))

    def softmax(self, x: str, name: str) -> str:
        return self._node("Softmax", [x], name, self.shapes[x], axis=-1)

    def max_pool2d(self, x: str, kernel: int, stride: int, padding: int, name: str) -> str:
        n, c, h, w = self.shapes[x]
        out = ((h + 2 * padding - kernel) // stride + 1, (w + 2 * padding - kernel) // stride + 1)
        return self._node("MaxPool", [x], name, (n, c, *out), kernel_shape=[kernel, kernel],
                          strides=[stride, stride], pads=[padding] * 4)

    def global_avg_pool_flat(self, x: str, name: str) -> str:
        n, c = self.shapes[x][:2]
        pooled = self._node("GlobalAveragePool", [x], f"{name}_pool", (n, c, 1, 1))
        return self._node("Flatten", [pooled], name, (n, c), axis=1)
