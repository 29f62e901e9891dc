"""The few layer calls the model zoo is written against, and the tilecraft side of them.

Each network of :mod:`tilecraft.models` is one Python function over a :class:`LayerBuilder`;
:class:`TeBuilder` answers every call with :mod:`tilecraft.ops` (weights as ``te.constant``),
:class:`tilecraft.models.onnx_builder.OnnxBuilder` with ONNX nodes and initializers. Both draw a
weight from a generator seeded by the network's seed and the weight's name, so the two
programs carry the same values whatever order they ask in.

>>> import numpy as np
>>> import tilecraft as tc
>>> b = TeBuilder(seed=0)
>>> x = b.input("x", (2, 3))
>>> y = b.relu(b.dense(x, 4, name="fc"), name="act")
>>> tc.reference.run(tc.Graph.from_outputs([y]), x=np.ones((2, 3), np.float32)).shape
(2, 4)
"""

from __future__ import annotations

import math
import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from tilecraft import ops, te

Value = Any  # a te Tensor for TeBuilder, an ONNX value name for OnnxBuilder


def seeded_weight(seed: int, name: str, shape: Sequence[int], fan_in: int) -> np.ndarray:
    """A float32 weight drawn uniformly in +-sqrt(3 / fan_in) (unit variance through a layer),
    from a generator seeded by ``seed`` and ``name``: the same value for every builder.

    >>> a = seeded_weight(0, "fc_w", (2, 2), 2)
    >>> bool((a == seeded_weight(0, "fc_w", (2, 2), 2)).all()), a.dtype.name
    (True, 'float32')
    """
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    bound = math.sqrt(3.0 / max(fan_in, 1))
    return rng.uniform(-bound, bound, tuple(shape)).astype(np.float32)


def seeded_positive(seed: int, name: str, shape: Sequence[int], low: float,
                    high: float) -> np.ndarray:
    """A float32 array uniform in [low, high) (batch-norm variances and scales)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return rng.uniform(low, high, tuple(shape)).astype(np.float32)


class LayerBuilder(ABC):
    """The layer calls a network makes. ``name`` prefixes every weight and node of the layer.

    Shapes follow PyTorch: activations NCHW, ``dense`` over the last axis of a 2-d value,
    conv weights OIHW. ``shape_of`` gives a value's shape so networks can plan reshapes.
    """

    def __init__(self, seed: int = 0):
        self.seed = seed

    def weight(self, name: str, shape: Sequence[int], fan_in: int) -> np.ndarray:
        return seeded_weight(self.seed, name, shape, fan_in)

    def batch_norm_params(self, name: str, channels: int) -> dict[str, np.ndarray]:
        """gamma, beta, running mean and variance of a batch norm, seeded by ``name``."""
        return {"gamma": seeded_positive(self.seed, f"{name}_gamma", (channels,), 0.5, 1.5),
                "beta": seeded_weight(self.seed, f"{name}_beta", (channels,), 9),
                "mean": seeded_weight(self.seed, f"{name}_mean", (channels,), 9),
                "var": seeded_positive(self.seed, f"{name}_var", (channels,), 0.5, 2.0)}

    @abstractmethod
    def input(self, name: str, shape: Sequence[int]) -> Value: ...

    @abstractmethod
    def shape_of(self, x: Value) -> tuple[int, ...]: ...

    @abstractmethod
    def dense(self, x: Value, out_features: int, name: str, bias: bool = True) -> Value:
        """``x @ W.T + b`` for a 2-d x (tokens, features)."""

    @abstractmethod
    def conv2d(self, x: Value, out_channels: int, kernel: int, name: str, stride: int = 1,
               padding: int = 0, groups: int = 1, bias: bool = False) -> Value: ...

    @abstractmethod
    def batch_norm(self, x: Value, name: str, eps: float = 1e-5) -> Value: ...

    @abstractmethod
    def layer_norm(self, x: Value, name: str, eps: float = 1e-5) -> Value:
        """Over the last axis, with seeded gamma and beta."""

    @abstractmethod
    def relu(self, x: Value, name: str) -> Value: ...

    @abstractmethod
    def relu6(self, x: Value, name: str) -> Value: ...

    @abstractmethod
    def gelu(self, x: Value, name: str) -> Value: ...

    @abstractmethod
    def add(self, a: Value, b: Value, name: str) -> Value: ...

    @abstractmethod
    def scale(self, x: Value, factor: float, name: str) -> Value: ...

    @abstractmethod
    def reshape(self, x: Value, shape: Sequence[int], name: str) -> Value: ...

    @abstractmethod
    def transpose(self, x: Value, perm: Sequence[int], name: str) -> Value: ...

    @abstractmethod
    def batch_matmul(self, a: Value, b: Value, name: str) -> Value:
        """``a[i] @ b[i]`` for 3-d a and b."""

    @abstractmethod
    def softmax(self, x: Value, name: str) -> Value:
        """Over the last axis."""

    @abstractmethod
    def max_pool2d(self, x: Value, kernel: int, stride: int, padding: int, name: str) -> Value: ...

    @abstractmethod
    def global_avg_pool_flat(self, x: Value, name: str) -> Value:
        """(N, C, H, W) -> (N, C): the mean over H and W."""


class TeBuilder(LayerBuilder):
    """Layers as :mod:`tilecraft.ops` computes over ``te.constant`` weights."""

    def input(self, name: str, shape: Sequence[int]) -> te.Tensor:
        return te.placeholder(tuple(shape), name=name)

    def shape_of(self, x: te.Tensor) -> tuple[int, ...]:
        return tuple(x.shape)

    def dense(self, x: te.Tensor, out_features: int, name: str, bias: bool = True) -> te.Tensor:
        in_features = x.shape[-1]
        w = te.constant(self.weight(f"{name}_w", (out_features, in_features), in_features),
                        name=f"{name}_w")
        b = (te.constant(self.weight(f"{name}_b", (out_features,), in_features), name=f"{name}_b")
             if bias else None)
        return ops.dense(x, w, bias=b, name=name)

    def conv2d(self, x: te.Tensor, out_channels: int, kernel: int, name: str, stride: int = 1,
               padding: int = 0, groups: int = 1, bias: bool = False) -> te.Tensor:
        in_channels = x.shape[1]
        fan_in = in_channels // groups * kernel * kernel
        w = te.constant(self.weight(f"{name}_w", (out_channels, in_channels // groups, kernel,
                                                  kernel), fan_in), name=f"{name}_w")
        if groups == in_channels and groups == out_channels and groups > 1:
            out = ops.depthwise_conv2d(x, w, stride=stride, padding=padding,
                                       name=name if not bias else f"{name}_conv")
        else:
            out = ops.conv2d(x, w, stride=stride, padding=padding, groups=groups,
                             name=name if not bias else f"{name}_conv")
        if not bias:
            return out
        b = te.constant(self.weight(f"{name}_b", (out_channels,), fan_in), name=f"{name}_b")
        return ops.bias_add(out, b, axis=1, name=name)

    def batch_norm(self, x: te.Tensor, name: str, eps: float = 1e-5) -> te.Tensor:
        p = {k: te.constant(v, name=f"{name}_{k}")
             for k, v in self.batch_norm_params(name, x.shape[1]).items()}
        return ops.batch_norm(x, p["mean"], p["var"], p["gamma"], p["beta"], eps=eps, name=name)

    def layer_norm(self, x: te.Tensor, name: str, eps: float = 1e-5) -> te.Tensor:
        features = x.shape[-1]
        gamma = te.constant(seeded_positive(self.seed, f"{name}_gamma", (features,), 0.5, 1.5),
                            name=f"{name}_gamma")
        beta = te.constant(self.weight(f"{name}_beta", (features,), 9), name=f"{name}_beta")
        return ops.layer_norm(x, gamma, beta, axes=-1, eps=eps, name=name)

    def relu(self, x: te.Tensor, name: str) -> te.Tensor:
        return ops.relu(x, name=name)

    def relu6(self, x: te.Tensor, name: str) -> te.Tensor:
        return ops.minimum(ops.relu(x, name=f"{name}_relu"), 6.0, name=name)

    def gelu(self, x: te.Tensor, name: str) -> te.Tensor:
        return ops.gelu(x, name=name)

    def add(self, a: te.Tensor, b: te.Tensor, name: str) -> te.Tensor:
        return ops.add(a, b, name=name)

    def scale(self, x: te.Tensor, factor: float, name: str) -> te.Tensor:
        return ops.scale(x, factor, name=name)

    def reshape(self, x: te.Tensor, shape: Sequence[int], name: str) -> te.Tensor:
        return ops.reshape(x, shape, name=name)

    def transpose(self, x: te.Tensor, perm: Sequence[int], name: str) -> te.Tensor:
        return ops.transpose(x, perm, name=name)

    def batch_matmul(self, a: te.Tensor, b: te.Tensor, name: str) -> te.Tensor:
        return ops.batch_matmul(a, b, name=name)

    def softmax(self, x: te.Tensor, name: str) -> te.Tensor:
        return ops.softmax(x, axis=-1, name=name)

    def max_pool2d(self, x: te.Tensor, kernel: int, stride: int, padding: int,
                   name: str) -> te.Tensor:
        return ops.max_pool2d(x, kernel, stride=stride, padding=padding, name=name)

    def global_avg_pool_flat(self, x: te.Tensor, name: str) -> te.Tensor:
        pooled = ops.global_avg_pool2d(x, name=f"{name}_pool")
        return ops.reshape(pooled, (x.shape[0], x.shape[1]), name=name)
