"""Vector addressing beyond affine indices: head splits and merges (``// K`` and ``% K`` with
``K`` a multiple of the lanes), fused loops (``K * (f // K) + f % K``), clamped indices (guard
clamps and edge-replicating clamps), each against numpy or the reference interpreter on
awkward shapes."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_x86_avx512.target import X86Avx512Target
from x86_kernels import buffer, kernel, load, loop, store, vloop, zeros_for

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.reference import run as reference
from tilecraft.te import Var, const
from tilecraft.te.expr import Binary, BinaryOp


def _sources(exe: tc.Executable) -> str:
    return "\n".join(ck.source.text for ck in exe.compiled)


@pytest.mark.parametrize(("tokens", "heads", "width"),
                         [(7, 3, 32), (5, 2, 20), (1, 1, 16), (13, 4, 48)])
def test_head_split_and_merge_match_the_reference(native, tokens, heads, width):
    x = te.placeholder((tokens, heads * width), name="x")
    split = ops.transpose(ops.reshape(x, (tokens, heads, width)), (1, 0, 2), name="split")
    c = te.placeholder((heads, tokens, width), name="c")
    merged = ops.reshape(ops.transpose(c, (1, 0, 2)), (tokens, heads * width), name="merged")
    rng = np.random.default_rng(tokens * 100 + width)
    for out, name in ((split, "x"), (merged, "c")):
        placeholder = x if name == "x" else c
        data = {name: rng.standard_normal(placeholder.shape).astype(np.float32)}
        exe = tc.compile(out, target=X86Avx512Target(threads=2))
        np.testing.assert_array_equal(exe(**data), reference(out, **data))
        if width % 16 == 0:  # whole vectors inside one head: contiguous loads, no gather
            assert "masked.gather" not in _sources(exe)


@pytest.mark.parametrize(("rows", "cols"), [(13, 7), (1, 1), (3, 16), (5, 33)])
def test_a_fused_loop_reads_its_rows_contiguously(run, rows, cols):
    x, b, y = buffer("X", (rows, cols)), buffer("B", (rows,)), buffer("Y", (rows, cols))
    f = Var("f")
    row, col = f // cols, f % cols
    body = vloop(f, rows * cols, store(y, (row, col), load(x, row, col) * 2.0 + load(b, row)))
    k = kernel("fused_rows", [x, b, y], ["Y"], body)
    rng = np.random.default_rng(rows + cols)
    data = rng.standard_normal((rows, cols)).astype(np.float32)
    bias = rng.standard_normal(rows).astype(np.float32)
    out = run(k, zeros_for(k, X=data, B=bias))["Y"]
    np.testing.assert_array_equal(out, data * np.float32(2) + bias[:, None])
    from tilecraft_x86_avx512.codegen import generate_llvm_ir

    plain = kernel("fused_copy", [x, y], ["Y"],
                   vloop(f, rows * cols, store(y, (row, col), load(x, row, col))))
    text = generate_llvm_ir(plain).text
    assert "masked.gather" not in text and "masked.scatter" not in text
    np.testing.assert_array_equal(run(plain, zeros_for(plain, X=data))["Y"], data)


@pytest.mark.parametrize("n", [1, 13, 17, 40])
@pytest.mark.parametrize("stride", [1, 2, 3, 5])
@pytest.mark.parametrize("window", ["row", "inner"])
def test_clamped_indices_replicate_the_edges(run, n, stride, window):
    """Edge-replicating reads, where the clamp changes values that are used (a guard clamp
    never does): ``Y[r, w] = X[r, clip(w * stride - 3, lo, hi)] + 1``."""
    lo, hi = (0, n - 1) if window == "row" else (min(2, n - 1), min(5, n - 1))
    rows, width = 3, (n + 6) // stride + 3
    x, y = buffer("X", (rows, n)), buffer("Y", (rows, width))
    r, w = Var("r"), Var("w")
    index = Binary(BinaryOp.MAX, Binary(BinaryOp.MIN, w * stride - 3, const(hi)), const(lo))
    body = loop(r, rows, vloop(w, width, store(y, (r, w), load(x, r, index) + 1.0)))
    k = kernel(f"clamped_{stride}", [x, y], ["Y"], body)
    data = np.random.default_rng(n * stride).standard_normal((rows, n)).astype(np.float32)
    columns = np.clip(np.arange(width) * stride - 3, lo, hi)
    out = run(k, zeros_for(k, X=data))["Y"]
    np.testing.assert_array_equal(out, data[:, columns] + np.float32(1))


@pytest.mark.parametrize("shape", [(1, 3, 13, 11), (2, 5, 7, 7), (1, 1, 2, 3), (1, 2, 1, 1)])
def test_pad_and_pooling_match_the_reference(shape):
    x = te.placeholder(shape, name="x")
    padded = ops.pad(ops.relu(x), [(0, 0), (0, 0), (1, 2), (3, 1)], name="padded")
    pooled = ops.max_pool2d(ops.relu(x), 3, stride=2, padding=1, name="pooled")
    data = {"x": np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)}
    for out in (padded, pooled):
        exe = tc.compile(out, target=X86Avx512Target(threads=2))
        np.testing.assert_array_equal(exe(**data), reference(out, **data))
        if shape[-1] > 1:
            assert "masked.gather" not in _sources(exe)
