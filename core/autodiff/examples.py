"""Small models to train (issue 18 item 5): an MLP and a CNN (conv-bn-relu x2 + dense), each a
forward graph ending in a cross-entropy loss, with their parameters' shapes and a random
initialisation.

Batch norm is the training kind: the batch's mean and population variance over (N, H, W),
computed in the graph (``ops.mean``, ``ops.variance``), so their gradients flow too, as in
PyTorch's ``F.batch_norm(training=True)``. The loss is the mean over the batch of
``-sum(onehot * log_softmax(logits))`` (``F.cross_entropy`` with class indices).

>>> model = small_cnn(batch=2, image=6, channels=(3, 4), classes=5)
>>> [p.name for p in model.params]
['w1', 'gamma1', 'beta1', 'w2', 'gamma2', 'beta2', 'wd', 'bd']
>>> model.loss.shape, [t.name for t in model.data]
((), ['x', 'onehot'])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tilecraft import ops, te
from tilecraft.graph import Graph
from tilecraft.te.tensor import Tensor


@dataclass(frozen=True)
class Model:
    graph: Graph
    loss: Tensor
    params: tuple[Tensor, ...]
    data: tuple[Tensor, ...]  # the input batch, then the one-hot labels

    def init(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Random parameters (He-scaled weights, gamma 1 +- 0.1, small biases), by name."""
        rng = np.random.default_rng(seed)
        values = {}
        for p in self.params:
            if p.name.startswith("gamma"):
                value = 1.0 + 0.1 * rng.standard_normal(p.shape)
            elif p.ndim == 1:
                value = 0.1 * rng.standard_normal(p.shape)
            else:
                fan_in = int(np.prod(p.shape[1:]))
                value = rng.standard_normal(p.shape) * np.sqrt(2.0 / fan_in)
            values[p.name] = value.astype(np.float32)
        return values

    def batch(self, seed: int = 0) -> dict[str, np.ndarray]:
        """A random input batch and random labels (one-hot), by name."""
        rng = np.random.default_rng(1000 + seed)
        x, onehot = self.data
        labels = rng.integers(0, onehot.shape[1], onehot.shape[0])
        return {x.name: rng.standard_normal(x.shape).astype(np.float32),
                onehot.name: np.eye(onehot.shape[1], dtype=np.float32)[labels]}


def cross_entropy(logits: Tensor, onehot: Tensor) -> Tensor:
    logp = ops.log_softmax(logits, axis=1, name="logp")
    total = ops.reduce_sum(ops.mul(onehot, logp, name="picked"), name="nll_sum")
    return ops.scale(total, -1.0 / logits.shape[0], name="loss")


def mlp(batch: int = 16, sizes: Sequence[int] = (32, 64, 48, 10)) -> Model:
    """``len(sizes) - 1`` dense layers with biases, relu between them."""
    x = te.placeholder((batch, sizes[0]), name="x")
    onehot = te.placeholder((batch, sizes[-1]), name="onehot")
    params = []
    h = x
    for layer, (n_in, n_out) in enumerate(zip(sizes, sizes[1:]), start=1):
        w = te.placeholder((n_out, n_in), name=f"w{layer}")
        b = te.placeholder((n_out,), name=f"b{layer}")
        params += [w, b]
        h = ops.dense(h, w, b, name=f"fc{layer}")
        if layer < len(sizes) - 1:
            h = ops.relu(h, name=f"relu{layer}")
    loss = cross_entropy(h, onehot)
    return Model(Graph.from_outputs([loss]), loss, tuple(params), (x, onehot))


def conv_bn_relu(x: Tensor, channels: int, stride: int, index: int) -> tuple[Tensor, list[Tensor]]:
    w = te.placeholder((channels, x.shape[1], 3, 3), name=f"w{index}")
    gamma = te.placeholder((channels,), name=f"gamma{index}")
    beta = te.placeholder((channels,), name=f"beta{index}")
    c = ops.conv2d(x, w, stride=stride, padding=1, name=f"conv{index}")
    mean = ops.mean(c, axes=(0, 2, 3), name=f"mean{index}")
    var = ops.variance(c, axes=(0, 2, 3), name=f"var{index}")
    bn = ops.batch_norm(c, mean, var, gamma, beta, name=f"bn{index}")
    return ops.relu(bn, name=f"relu{index}"), [w, gamma, beta]


def small_cnn(batch: int = 4, image: int = 8, channels: Sequence[int] = (3, 8, 16),
              classes: int = 10) -> Model:
    """conv3x3-bn-relu, conv3x3/2-bn-relu, then a dense layer (with bias) on the flattened
    features: ``channels`` are the input's and each conv's."""
    if len(channels) == 2:
        channels = (channels[0], channels[1], channels[1])
    x = te.placeholder((batch, channels[0], image, image), name="x")
    onehot = te.placeholder((batch, classes), name="onehot")
    h, params1 = conv_bn_relu(x, channels[1], 1, 1)
    h, params2 = conv_bn_relu(h, channels[2], 2, 2)
    features = int(np.prod(h.shape[1:]))
    flat = ops.reshape(h, (batch, features), name="flat")
    wd = te.placeholder((classes, features), name="wd")
    bd = te.placeholder((classes,), name="bd")
    loss = cross_entropy(ops.dense(flat, wd, bd, name="fc"), onehot)
    return Model(Graph.from_outputs([loss]), loss, (*params1, *params2, wd, bd), (x, onehot))


__all__ = ["Model", "cross_entropy", "mlp", "small_cnn"]
