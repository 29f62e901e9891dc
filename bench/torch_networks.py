"""The model zoo's networks (tilecraft.models) as PyTorch functions with the same seeded
weights, for bench_networks.py's torch eager and torch.compile columns.

:class:`TorchBuilder` answers the zoo's layer calls (tilecraft.models.builder.LayerBuilder) with
``torch.nn.functional``; weights are drawn once, by name, as the other builders draw them.

    forward = torch_network("resnet18", small=True)   # x (numpy or torch) -> torch tensor
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

import tilecraft.models as models
from tilecraft.models.builder import LayerBuilder, seeded_positive


class TorchBuilder(LayerBuilder):
    """Values are torch tensors; ``input`` returns the tensor being run."""

    def __init__(self, seed: int = 0, device: str = "cpu"):
        super().__init__(seed)
        self.device = device
        self.x: torch.Tensor | None = None
        self._weights: dict[str, torch.Tensor] = {}

    def _param(self, name: str, make: Callable[[], np.ndarray]) -> torch.Tensor:
        if name not in self._weights:
            self._weights[name] = torch.from_numpy(np.ascontiguousarray(make())).to(self.device)
        return self._weights[name]

    def input(self, name: str, shape: Sequence[int]) -> torch.Tensor:
        assert self.x is not None and tuple(self.x.shape) == tuple(shape)
        return self.x

    def shape_of(self, x: torch.Tensor) -> tuple[int, ...]:
        return tuple(x.shape)

    def dense(self, x: torch.Tensor, out_features: int, name: str,
              bias: bool = True) -> torch.Tensor:
        n = x.shape[-1]
        w = self._param(f"{name}_w", lambda: self.weight(f"{name}_w", (out_features, n), n))
        b = self._param(f"{name}_b", lambda: self.weight(f"{name}_b", (out_features,), n)) \
            if bias else None
        return F.linear(x, w, b)

    def conv2d(self, x: torch.Tensor, out_channels: int, kernel: int, name: str,
               stride: int = 1, padding: int = 0, groups: int = 1,
               bias: bool = False) -> torch.Tensor:
        fan_in = x.shape[1] // groups * kernel * kernel
        shape = (out_channels, x.shape[1] // groups, kernel, kernel)
        w = self._param(f"{name}_w", lambda: self.weight(f"{name}_w", shape, fan_in))
        b = self._param(f"{name}_b", lambda: self.weight(f"{name}_b", (out_channels,), fan_in)) \
            if bias else None
        return F.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)

    def batch_norm(self, x: torch.Tensor, name: str, eps: float = 1e-5) -> torch.Tensor:
        p = {k: self._param(f"{name}_{k}", lambda k=k: self.batch_norm_params(name, x.shape[1])[k])
             for k in ("gamma", "beta", "mean", "var")}
        return F.batch_norm(x, p["mean"], p["var"], p["gamma"], p["beta"], False, 0.0, eps)

    def layer_norm(self, x: torch.Tensor, name: str, eps: float = 1e-5) -> torch.Tensor:
        n = x.shape[-1]
        gamma = self._param(f"{name}_gamma",
                            lambda: seeded_positive(self.seed, f"{name}_gamma", (n,), 0.5, 1.5))
        beta = self._param(f"{name}_beta", lambda: self.weight(f"{name}_beta", (n,), 9))
        return F.layer_norm(x, (n,), gamma, beta, eps)

    def relu(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.relu(x)

    def relu6(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return torch.clamp(x, 0.0, 6.0)

    def gelu(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.gelu(x)

    def add(self, a: torch.Tensor, b: torch.Tensor, name: str) -> torch.Tensor:
        return a + b

    def scale(self, x: torch.Tensor, factor: float, name: str) -> torch.Tensor:
        return x * factor

    def reshape(self, x: torch.Tensor, shape: Sequence[int], name: str) -> torch.Tensor:
        return x.reshape(tuple(shape))

    def transpose(self, x: torch.Tensor, perm: Sequence[int], name: str) -> torch.Tensor:
        return x.permute(*perm)

    def batch_matmul(self, a: torch.Tensor, b: torch.Tensor, name: str) -> torch.Tensor:
        return torch.bmm(a, b)

    def softmax(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return torch.softmax(x, dim=-1)

    def max_pool2d(self, x: torch.Tensor, kernel: int, stride: int, padding: int,
                   name: str) -> torch.Tensor:
        return F.max_pool2d(x, kernel, stride, padding)

    def global_avg_pool_flat(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return x.mean(dim=(2, 3))


def torch_network(name: str, small: bool = False, seed: int = 0,
                  device: str = "cpu") -> Callable[[Any], Any]:
    """Network ``name`` as ``forward(x) -> torch.Tensor`` (no autograd) on ``device`` (x is
    moved there; the result stays there), weights drawn on the first call and kept."""
    network = models.get(name)
    build = network.small if small else network.full
    builder = TorchBuilder(seed, device)

    def forward(x: Any) -> torch.Tensor:
        builder.x = torch.as_tensor(x).to(device)
        with torch.no_grad():
            return build(builder)

    return forward
