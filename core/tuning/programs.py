"""Programs named by shape, for tuning workloads (``Workload("tilecraft.tuning.programs:matmul",
(1024, 1024, 1024))``): each function returns the output tensor of a small graph.

>>> matmul(4, 5, 6).shape
(4, 5)
>>> conv2d(1, 3, 8, 8, 4, 3, stride=2, padding=1).shape
(1, 4, 4, 4)
"""

from __future__ import annotations

from tilecraft import ops, te
from tilecraft.te.tensor import Tensor


def matmul(m: int, n: int, k: int) -> Tensor:
    """``C[m, n] = A[m, k] @ B[k, n]`` in float32."""
    return ops.matmul(te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B"),
                      name="C")


def batch_matmul(batch: int, m: int, n: int, k: int) -> Tensor:
    """``C[b, m, n] = A[b, m, k] @ B[b, k, n]`` in float32."""
    return ops.batch_matmul(te.placeholder((batch, m, k), name="A"),
                            te.placeholder((batch, k, n), name="B"), name="C")


def conv2d(batch: int, channels: int, height: int, width: int, filters: int, kernel: int,
           stride: int = 1, padding: int = 0) -> Tensor:
    """An NCHW convolution with ``filters`` output channels and a square ``kernel``."""
    return ops.conv2d(te.placeholder((batch, channels, height, width), name="x"),
                      te.placeholder((filters, channels, kernel, kernel), name="w"),
                      stride=stride, padding=padding, name="y")


__all__ = ["batch_matmul", "conv2d", "matmul"]
