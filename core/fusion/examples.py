"""Standard chains of thesis ch. 3, built from te and the ops library, with the thesis's loop
names (used by the docs, the tests and the benchmarks).

- :func:`gemm_chain`: ``C = A x B, E = C x D`` with A (M, K), B (K, L), D (L, N); loops m k l n.
- :func:`attention_chain`: the batch GEMM core of self-attention, ``softmax(Q K^T * s) V``.
- :func:`conv_chain`: two convolutions with a ReLU between (3x3 "same" by default).

>>> chain = gemm_chain(512, 256, 384, 128)
>>> chain.loop_names, chain.extents["k"]
(('m', 'n', 'l', 'k'), 384)
>>> att = attention_chain(batch=2, seq=64, head_dim=32)
>>> att.loop_names, att.loop("l").full_extent
(('b', 'm', 'n', 'l', 'k'), True)
>>> len(conv_chain().loops)
10
"""

from __future__ import annotations

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.fusion.chain import Chain
from tilecraft.fusion.derive import chain_from_computes
from tilecraft.graph import Graph
from tilecraft.te.tensor import Tensor


def gemm_chain_tensors(m: int, n: int, k: int, l: int,  # noqa: E741 - the thesis's name
                       dtype: DType | str = "float32") -> tuple[Tensor, Tensor]:
    """The te computes ``C[m, l] = sum_k A[m, k] B[k, l]`` and ``E[m, n] = sum_l C[m, l]
    D[l, n]``, written with the thesis's loop names."""
    A = te.placeholder((m, k), dtype, name="A")  # noqa: N806
    B = te.placeholder((k, l), dtype, name="B")  # noqa: N806
    D = te.placeholder((l, n), dtype, name="D")  # noqa: N806
    rk = te.reduce_axis(k, name="k")
    rl = te.reduce_axis(l, name="l")
    C = te.compute((m, l), lambda m, l: te.sum(A[m, rk] * B[rk, l], axis=rk), name="C")  # noqa
    E = te.compute((m, n), lambda m, n: te.sum(C[m, rl] * D[rl, n], axis=rl), name="E")  # noqa
    return C, E


def gemm_chain(m: int, n: int, k: int, l: int,  # noqa: E741
               dtype: DType | str = "float32") -> Chain:
    """The GEMM chain of Fig. 3.1 / Table 3.4 with loops m, n, l, k."""
    return chain_from_computes(gemm_chain_tensors(m, n, k, l, dtype))


def attention_tensors(batch: int = 12, seq: int = 512, head_dim: int = 64,
                      dtype: DType | str = "float32") -> tuple[Tensor, Tensor, Graph]:
    """``S = Q K^T``, ``O = softmax(S / sqrt(d)) V`` with ops.batch_matmul and ops.softmax."""
    q = te.placeholder((batch, seq, head_dim), dtype, name="Q")
    k = te.placeholder((batch, seq, head_dim), dtype, name="K")
    v = te.placeholder((batch, seq, head_dim), dtype, name="V")
    scores = ops.batch_matmul(q, k, transpose_b=True, name="S")
    probs = ops.softmax(ops.scale(scores, 1.0 / head_dim ** 0.5, name="scaled"), name="P")
    out = ops.batch_matmul(probs, v, name="O")
    return scores, out, Graph.from_outputs([out])


def attention_chain(batch: int = 12, seq: int = 512, head_dim: int = 64,
                    dtype: DType | str = "float32") -> Chain:
    """The attention core as a batch GEMM chain with loops b, m, n, l, k (l kept whole: the
    softmax between the GEMMs reduces along it)."""
    scores, out, graph = attention_tensors(batch, seq, head_dim, dtype)
    return chain_from_computes([scores, out], graph,
                               loop_names={"i": "m", "j": "n", "k": "l", "k1": "k"})


def conv_chain_tensors(batch: int = 1, channels: int = 16, height: int = 14,
                       width: int = 14, mid_channels: int = 16, out_channels: int = 16,
                       kernel: int = 3, padding: int = 1,
                       dtype: DType | str = "float32") -> tuple[Tensor, Tensor, Graph]:
    """``y = conv2d(relu(conv2d(x, w1)), w2)`` (NCHW) with ``padding`` on both."""
    x = te.placeholder((batch, channels, height, width), dtype, name="x")
    w1 = te.placeholder((mid_channels, channels, kernel, kernel), dtype, name="w1")
    w2 = te.placeholder((out_channels, mid_channels, kernel, kernel), dtype, name="w2")
    first = ops.conv2d(x, w1, padding=padding, name="conv1")
    second = ops.conv2d(ops.relu(first, name="act"), w2, padding=padding, name="conv2")
    return first, second, Graph.from_outputs([second])


def conv_chain(batch: int = 1, channels: int = 16, height: int = 14, width: int = 14,
               mid_channels: int = 16, out_channels: int = 16, kernel: int = 3,
               padding: int = 1, dtype: DType | str = "float32") -> Chain:
    """Two convolutions as a chain of ten loops: n, k, h, w, rc, rh, rw of the second and
    rc1, rh1, rw1 (the first's reductions); the first's h and w tiles carry the halo."""
    first, second, graph = conv_chain_tensors(batch, channels, height, width, mid_channels,
                                              out_channels, kernel, padding, dtype)
    return chain_from_computes([first, second], graph)
