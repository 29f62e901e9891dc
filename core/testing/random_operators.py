"""The ``operator`` family of :mod:`tilecraft.testing.random_programs`: library operators
(:mod:`tilecraft.ops`) with awkward random shapes and parameters, each followed or not by an
elementwise epilogue — contractions large and small (a CPU target's templates and its plain
loop nests, every edge tile), convolutions with stride, dilation, padding and groups, depthwise
and transposed convolutions, pooling, softmax / log-softmax along any axis, layer norm, mean
and variance.
"""

# ruff: noqa: N803, N806, E741 - tensors are named as in the math (A @ B, X, W)

from __future__ import annotations

import math

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.testing.random_programs import Choices, RandomProgram, inputs_for

SIDES = (1, 2, 3, 5, 7, 16, 17, 31, 33, 48, 64, 65, 97, 130)
KINDS = ("matmul", "batch_matmul", "dense", "conv2d", "conv1d", "depthwise", "conv_transpose2d",
         "pool", "softmax", "layer_norm", "moments")


def _contraction(choices: Choices, kind: str) -> tuple[te.Tensor, int]:
    m, n, k = (choices.choice(SIDES) for _ in range(3))
    if kind == "matmul":
        ta, tb = choices.choice([False, True]), choices.choice([False, True])
        A = te.placeholder((k, m) if ta else (m, k), name="A")
        B = te.placeholder((n, k) if tb else (k, n), name="B")
        return ops.matmul(A, B, transpose_a=ta, transpose_b=tb, name="C"), k
    if kind == "batch_matmul":
        batch = choices.integer(1, 3)
        A = te.placeholder((batch, m, k), name="A")
        return ops.batch_matmul(A, te.placeholder((batch, k, n), name="B"), name="C"), k
    bias = te.placeholder((n,), name="bias") if choices.integer(0, 1) else None
    return ops.dense(te.placeholder((m, k), name="x"), te.placeholder((n, k), name="W"),
                     bias=bias, name="C"), k


def _convolution(choices: Choices, kind: str) -> tuple[te.Tensor, int]:
    batch = choices.integer(1, 2)
    groups = choices.choice([1, 1, 2, 3])
    c = groups * choices.choice([1, 2, 3, 5, 8])
    k = groups * choices.choice([1, 2, 4, 7, 16])
    h, w = choices.choice([1, 4, 7, 9, 14, 17]), choices.choice([1, 5, 8, 13, 16])
    r, s = choices.choice([1, 2, 3, 5]), choices.choice([1, 3])
    stride, dilation = choices.choice([1, 1, 2, 3]), choices.choice([1, 1, 2])
    padding = choices.integer(0, 2)
    # keep at least one output pixel
    h = max(h, dilation * (r - 1) + 1 - 2 * padding)
    w = max(w, dilation * (s - 1) + 1 - 2 * padding)
    if kind == "conv2d":
        x = te.placeholder((batch, c, h, w), name="x")
        W = te.placeholder((k, c // groups, r, s), name="w")
        return ops.conv2d(x, W, stride=stride, padding=padding, dilation=dilation,
                          groups=groups, name="C"), c // groups * r * s
    if kind == "conv1d":
        x = te.placeholder((batch, c, h * w), name="x")
        W = te.placeholder((k, c // groups, r), name="w")
        return ops.conv1d(x, W, stride=stride, padding=padding, dilation=dilation,
                          groups=groups, name="C"), c // groups * r
    if kind == "depthwise":
        mult = choices.choice([1, 2])
        x = te.placeholder((batch, c, h, w), name="x")
        W = te.placeholder((c * mult, 1, r, s), name="w")
        return ops.depthwise_conv2d(x, W, stride=stride, padding=padding, dilation=dilation,
                                    name="C"), r * s
    x = te.placeholder((batch, c, h, w), name="x")
    W = te.placeholder((c, k // groups, r, s), name="w")
    padding = min(padding, (r - 1) * dilation, (s - 1) * dilation)
    return ops.conv_transpose2d(x, W, stride=stride, padding=padding, dilation=dilation,
                                groups=groups, name="C"), c * r * s


def _memory_bound(choices: Choices, kind: str) -> tuple[te.Tensor, int]:
    dtype = choices.choice([DType.FLOAT32, DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16])
    if kind == "pool":
        x = te.placeholder((choices.integer(1, 2), choices.choice([1, 3, 17]),
                            choices.choice([3, 5, 8, 13]), choices.choice([3, 6, 11])),
                           dtype, name="x")
        size, stride = choices.choice([2, 3]), choices.choice([None, 1, 2])
        padding = choices.integer(0, size // 2)
        pool = choices.choice([ops.max_pool2d, ops.avg_pool2d])
        return pool(x, size, stride=stride, padding=padding, name="C"), size * size
    ndim = choices.integer(1, 3)
    shape = tuple(choices.choice([1, 3, 16, 17, 33, 64, 100]) for _ in range(ndim))
    x = te.placeholder(shape, dtype, name="x")
    axis = choices.integer(-ndim, ndim - 1)
    if kind == "softmax":
        softmax = choices.choice([ops.softmax, ops.log_softmax])
        return softmax(x, axis=axis, name="C"), shape[axis]
    if kind == "layer_norm":
        normalized = shape[-1:]
        gamma = te.placeholder(normalized, dtype, name="gamma") if choices.integer(0, 1) else None
        beta = te.placeholder(normalized, dtype, name="beta") if choices.integer(0, 1) else None
        return ops.layer_norm(x, gamma, beta, name="C"), shape[-1]
    axes = sorted({choices.integer(0, ndim - 1) for _ in range(choices.integer(1, ndim))})
    moment = choices.choice([ops.mean, ops.variance])
    return moment(x, axes=axes, keepdims=choices.choice([False, True]), name="C"), \
        math.prod(shape[a] for a in axes)


def operator(choices: Choices) -> RandomProgram:
    """One library operator with random shapes and parameters, perhaps with an epilogue."""
    kind = choices.choice(KINDS)
    if kind in ("matmul", "batch_matmul", "dense"):
        C, terms = _contraction(choices, kind)
    elif kind in ("conv2d", "conv1d", "depthwise", "conv_transpose2d"):
        C, terms = _convolution(choices, kind)
    else:
        C, terms = _memory_bound(choices, kind)
    out = C
    epilogue = choices.choice(["none", "relu", "gelu", "scale"])
    if epilogue == "relu":
        out = ops.relu(C, name="E")
    elif epilogue == "gelu":
        out = ops.gelu(C, name="E")
    elif epilogue == "scale":
        out = te.compute(C.shape, lambda *i: C[i] * 0.5 - 1.0, name="E")
    graph = Graph.from_outputs([out])
    inputs = dict(inputs_for(graph, choices.integer(0, 2**31 - 1)))
    return RandomProgram("operator", graph, inputs, terms=max(1, terms))


__all__ = ["KINDS", "operator"]
