"""Row groups (softmax, log_softmax, layer norm) as one x86 kernel each, against the reference
(awkward widths 1, 7, 513; 1 and 13 rows)."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.reference import run

CASES = [((1, 7), "softmax"), ((13, 513), "softmax"), ((13, 1), "log_softmax"),
         ((2, 13, 7), "log_softmax"), ((13, 7), "layer_norm"), ((1, 513), "layer_norm"),
         ((13, 1), "layer_norm")]


@pytest.mark.parametrize(("shape", "op"), CASES)
def test_row_group_is_one_kernel_matching_the_reference(shape, op):
    rng = np.random.default_rng(len(shape) * 1000 + shape[-1])
    x = te.placeholder(shape, name="x")
    arrays = {"x": (rng.standard_normal(shape) * 4).astype(np.float32)}
    if op == "layer_norm":
        g = te.placeholder(shape[-1:], name="g")
        b = te.placeholder(shape[-1:], name="b")
        out = ops.layer_norm(x, g, b, name="y")
        arrays.update(g=rng.standard_normal(shape[-1:]).astype(np.float32),
                      b=rng.standard_normal(shape[-1:]).astype(np.float32))
    else:
        out = getattr(ops, op)(x, name="y")
    exe = tc.compile(out, target=X86Avx512Target(threads=2))
    assert [k.name for k in exe.kernels] == ["y"]
    assert exe.kernels[0].attrs["schedule"].startswith("row group")
    np.testing.assert_allclose(exe(**arrays), run(out, **arrays), rtol=2e-5, atol=2e-5)


def test_a_scaled_input_is_taken_into_the_kernel():
    x = te.placeholder((13, 513), name="x")
    scaled = te.compute(x.shape, lambda i, j: x[i, j] * 0.125, name="scaled")
    out = ops.softmax(scaled, name="y")
    exe = tc.compile(out, target=X86Avx512Target(threads=1))
    assert len(exe.kernels) == 1
    data = np.random.default_rng(3).standard_normal((13, 513)).astype(np.float32) * 30
    np.testing.assert_allclose(exe(x=data), run(out, x=data), rtol=2e-5, atol=1e-6)


def test_a_softmax_gradient_is_one_kernel_and_reads_no_sum_before_it_is_final():
    """The backward pass's sum over grad * exp / sum**2 reads the forward sum: it must not be
    accumulated in the pass that accumulates that sum."""
    from tilecraft.autodiff import grad
    from tilecraft.graph import Graph

    x = te.placeholder((13, 17), name="x")
    graph = Graph.from_outputs(grad(ops.softmax(ops.gelu(x, name="g"), name="y"), [x]))
    exe = tc.compile(graph, target=X86Avx512Target(threads=1))
    assert len(exe.kernels) == 1
    rng = np.random.default_rng(5)
    arrays = {t.name: rng.uniform(-1, 1, t.shape).astype(np.float32) for t in graph.inputs}
    np.testing.assert_allclose(exe(**arrays), run(graph, **arrays), rtol=2e-4, atol=2e-5)


def test_rows_whose_buffers_exceed_half_of_l2_stay_unfused_with_a_note():
    x = te.placeholder((2, 1_000_000), name="x")
    out = ops.softmax(ops.gelu(x, name="g"), name="y")  # g and exp: 8 MB of row buffers
    exe = tc.compile(out, target=X86Avx512Target(threads=1))
    assert len(exe.kernels) > 1
    assert any("not fused: its row buffers" in note for note in exe.report.notes)
    data = np.random.default_rng(4).standard_normal((2, 1_000_000)).astype(np.float32)
    np.testing.assert_allclose(exe(x=data), run(out, x=data), rtol=2e-5, atol=1e-9)
