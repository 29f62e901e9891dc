"""Random contraction programs for :mod:`tilecraft.testing.random_programs`: chains a CPU
target's fusion planner fuses, and the tensorized int8 / bfloat16 contractions.

- ``gemm_chain``: ``(batch_)matmul -> memory-bound computes -> (batch_)matmul`` — nothing,
  relu, gelu, leaky relu, softmax, or a random tree of the product with a bias broadcast along
  its rows; extents awkward (primes, non-divisible) and the chain's flops at least
  :data:`FUSABLE_FLOPS`, so that fusion pays on a CPU (``program.fused`` names its computes);
- ``conv_chain``: ``conv2d (1x1 or 3x3, stride 1 or 2, padded) -> elementwise -> 1x1 conv2d``
  over NCHW images of awkward sizes (thesis Table 3.6, scaled down);
- ``int8_gemm``: matmul / dense / batch_matmul / conv2d of int8 or uint8 operands (every sign
  pair) accumulating in int32, compared exactly (``features = ("avx512_vnni",)`` when the
  contraction is large enough to be tensorized, :data:`TENSORIZE_FLOPS`; one in four is tiny);
- ``bf16_gemm``: matmul / batch_matmul of bfloat16 operands accumulating in float32
  (``features = ("avx512_bf16",)`` likewise).
"""

# ruff: noqa: N803, N806, E741 - tensors are named as in the math (A @ B, X, T)

from __future__ import annotations

import math

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.testing.random_programs import Choices, RandomProgram, inputs_for

#: a chain does at least this many flops: twice the 2 * 64^3 below which a CPU target's
#: chain fusion does not pay (the x86 plugin's MIN_CHAIN_FLOPS)
FUSABLE_FLOPS = 4 * 64 ** 3

#: a contraction does at least this many flops to be tensorized: twice the 2 * 32^3 below which
#: a CPU target's template does not pay (the x86 plugin's MIN_FLOPS)
TENSORIZE_FLOPS = 4 * 32 ** 3

MIDDLES = ("none", "relu", "gelu", "leaky_relu", "softmax", "tree")
PRIMES_AND_ROUND = (17, 19, 23, 29, 31, 32, 33, 37, 41, 47, 48, 53, 61, 64, 67, 71, 80, 97)


def _middle(choices: Choices, T: te.Tensor) -> tuple[te.Tensor, list[te.Tensor]]:
    """The memory-bound computes between the two products; returns the last one and the
    computes themselves."""
    kind = choices.choice(MIDDLES)
    if kind == "none":
        return T, []
    if kind == "relu":
        Z = ops.relu(T, name="R")
    elif kind == "gelu":
        Z = ops.gelu(T, name="G")
    elif kind == "leaky_relu":
        Z = ops.leaky_relu(T, 0.1, name="L")
    elif kind == "softmax":
        Z = ops.softmax(T, name="S")
    else:
        bias = te.placeholder(T.shape[-1:], "float32", name="bias")
        scale = choices.choice([0.5, 0.125, 1.0])
        form = choices.integer(0, 3)

        def body(*idx: te.Expr) -> te.Expr:
            value = T[idx] * scale + bias[idx[-1]]
            if form == 0:
                return te.max(value, 0.0)
            if form == 1:
                return te.tanh(value)
            if form == 2:
                return te.select(value > 0.0, value, value * 0.01)
            return value * te.sigmoid(value)

        Z = te.compute(T.shape, body, name="M")
    return Z, [Z]


def gemm_chain(choices: Choices) -> RandomProgram:
    """``A @ B -> middle -> @ D`` with awkward extents, big enough to fuse."""
    batch = choices.integer(1, 2)
    m, k, l, n = (choices.choice(PRIMES_AND_ROUND) for _ in range(4))
    while 2 * batch * m * l * (k + n) < FUSABLE_FLOPS:
        m += choices.choice(PRIMES_AND_ROUND)
    lead = (batch,) if batch > 1 or choices.integer(0, 1) else ()
    A = te.placeholder((*lead, m, k), "float32", name="A")
    B = te.placeholder((*lead, k, l), "float32", name="B")
    D = te.placeholder((*lead, l, n), "float32", name="D")
    product = ops.batch_matmul if lead else ops.matmul
    T = product(A, B, name="T")
    Z, _ = _middle(choices, T)
    E = product(Z, D, name="E")
    graph = Graph.from_outputs([E])
    inputs = dict(inputs_for(graph, choices.integer(0, 2**31 - 1), 0.5))
    fused = tuple(t.name for t in graph.computes)
    return RandomProgram("gemm_chain", graph, inputs, fused=fused, terms=max(k, l))


def conv_chain(choices: Choices) -> RandomProgram:
    """``conv2d -> elementwise -> 1x1 conv2d`` over an awkward image, big enough to fuse."""
    ic = choices.choice([3, 5, 8, 16, 17])
    oc1 = choices.choice([16, 19, 32, 33, 48])
    oc2 = choices.choice([8, 13, 16, 31])
    k1 = choices.choice([1, 3])
    stride = choices.choice([1, 1, 2])
    h, w = choices.choice([7, 11, 14, 17, 23]), choices.choice([7, 12, 14, 19, 23])

    def flops(h: int, w: int) -> int:
        pixels = math.ceil(h / stride) * math.ceil(w / stride)
        return 2 * pixels * oc1 * (ic * k1 * k1 + oc2)

    while flops(h, w) < FUSABLE_FLOPS:
        h, w = h + 5, w + 3
    x = te.placeholder((1, ic, h, w), "float32", name="x")
    w1 = te.placeholder((oc1, ic, k1, k1), "float32", name="w1")
    w2 = te.placeholder((oc2, oc1, 1, 1), "float32", name="w2")
    conv1 = ops.conv2d(x, w1, stride=stride, padding=k1 // 2, name="conv1")
    act = choices.choice(["relu", "gelu", "bias_relu"])
    if act == "relu":
        mid = ops.relu(conv1, name="act")
    elif act == "gelu":
        mid = ops.gelu(conv1, name="act")
    else:
        bias = te.placeholder((oc1,), "float32", name="bias")
        mid = te.compute(conv1.shape, lambda b, c, i, j: te.max(conv1[b, c, i, j] + bias[c], 0.0),
                         name="act")
    out = ops.conv2d(mid, w2, name="conv2")
    graph = Graph.from_outputs([out])
    inputs = dict(inputs_for(graph, choices.integer(0, 2**31 - 1), 0.5))
    names = tuple(t.name for t in graph.computes if t.name in ("conv1", "act", "conv2"))
    return RandomProgram("conv_chain", graph, inputs, fused=names,
                         terms=max(ic * k1 * k1, oc1))


INT8_SIGNS = ((DType.UINT8, DType.INT8), (DType.INT8, DType.INT8), (DType.INT8, DType.UINT8),
              (DType.UINT8, DType.UINT8))


def _gemm_extents(choices: Choices) -> tuple[int, int, int]:
    """``(m, n, k)``: one time in four tiny (a side of 1 or 3: a CPU target's plain loop nest),
    else at least :data:`TENSORIZE_FLOPS` with both sides >= 4 (its tensorized template)."""
    if choices.integer(0, 3) == 0:
        return (choices.choice([1, 3, 5]), choices.choice([1, 3, 17]),
                choices.choice([1, 2, 3, 7]))
    m, n = choices.choice([4, 16, 17, 33, 40, 67]), choices.choice([4, 16, 17, 31, 48, 65])
    k = choices.choice([16, 31, 61, 64, 100, 130])
    while 2 * m * n * k < TENSORIZE_FLOPS:
        m, k = m + 13, k + 16
    return m, n, k


def _tensorizes(graph: Graph) -> bool:
    """Whether the contraction is big enough for a CPU target's tensorized template."""
    from tilecraft.passes.contraction import as_dot_product_contraction

    dot = as_dot_product_contraction(graph.outputs[0])
    if dot is None:
        return False
    _, rows, cols, _ = dot.contraction.extents()
    return dot.contraction.flops >= TENSORIZE_FLOPS and min(rows, cols) >= 4


def int8_gemm(choices: Choices) -> RandomProgram:
    """An int8/uint8 contraction accumulating in int32 (VNNI ``vpdpbusd`` on x86)."""
    a_type, b_type = choices.choice(INT8_SIGNS)
    kind = choices.choice(["matmul", "matmul", "dense", "batch_matmul", "conv2d"])
    m, n, k = _gemm_extents(choices)
    if kind == "matmul":
        A = te.placeholder((m, k), a_type, name="A")
        C = ops.matmul(A, te.placeholder((k, n), b_type, name="B"), out_dtype="int32", name="C")
    elif kind == "dense":
        A = te.placeholder((m, k), a_type, name="A")
        C = ops.dense(A, te.placeholder((n, k), b_type, name="W"), out_dtype="int32", name="C")
    elif kind == "batch_matmul":
        batch = choices.integer(1, 3)
        A = te.placeholder((batch, m, k), a_type, name="A")
        C = ops.batch_matmul(A, te.placeholder((batch, k, n), b_type, name="B"),
                             out_dtype="int32", name="C")
    else:
        channels, size = choices.choice([1, 3, 4, 8, 13]), choices.choice([5, 8, 11, 16])
        ksize = choices.choice([1, 3])
        A = te.placeholder((1, channels, size, size), a_type, name="image")
        C = ops.conv2d(A, te.placeholder((n, channels, ksize, ksize), b_type, name="weight"),
                       padding=ksize // 2, out_dtype="int32", name="C")
    graph = Graph.from_outputs([C])
    inputs = dict(inputs_for(graph, choices.integer(0, 2**31 - 1)))
    features = ("avx512_vnni",) if _tensorizes(graph) else ()
    return RandomProgram("int8_gemm", graph, inputs, features=features)


def bf16_gemm(choices: Choices) -> RandomProgram:
    """A bfloat16 matmul accumulating in float32 (``vdpbf16ps`` on x86)."""
    m, n, k = _gemm_extents(choices)
    if choices.integer(0, 1):
        A = te.placeholder((m, k), "bfloat16", name="A")
        C = ops.matmul(A, te.placeholder((k, n), "bfloat16", name="B"), out_dtype="float32",
                       name="C")
    else:
        batch = choices.integer(1, 3)
        A = te.placeholder((batch, m, k), "bfloat16", name="A")
        C = ops.batch_matmul(A, te.placeholder((batch, k, n), "bfloat16", name="B"),
                             out_dtype="float32", name="C")
    graph = Graph.from_outputs([C])
    inputs = dict(inputs_for(graph, choices.integer(0, 2**31 - 1)))
    features = ("avx512_bf16",) if _tensorizes(graph) else ()
    return RandomProgram("bf16_gemm", graph, inputs, features=features, terms=k)


__all__ = ["FUSABLE_FLOPS", "TENSORIZE_FLOPS", "bf16_gemm", "conv_chain", "gemm_chain", "int8_gemm"]
