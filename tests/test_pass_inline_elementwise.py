"""inline_elementwise: elementwise computes folded into the memory-bound computes reading them;
values equal the reference before and after; contraction operands, outputs and expensive
computes read twice stay tensors; on by default, off through passes={...: False}."""

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.passes import check_equivalent_interface
from tilecraft.passes.inline_elementwise import inline_elementwise


def _same_values(graph, after, seed=0):
    check_equivalent_interface(graph, after, "inline_elementwise")
    rng = np.random.default_rng(seed)
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    np.testing.assert_array_equal(tc.reference.run(after, inputs=inputs),
                                  tc.reference.run(graph, inputs=inputs))
    return inputs


def _attention_tail():
    """bias add -> head split (reshape + transpose) -> scores -> scaled softmax -> context;
    7 tokens, 2 heads of 3 (odd sizes)."""
    rng = np.random.default_rng(1)
    x = te.placeholder((7, 6), name="x")
    w = te.constant(rng.standard_normal((6, 6)), "float32", name="w")
    b = te.constant(rng.standard_normal(6), "float32", name="b")
    q = ops.add(ops.matmul(x, w, name="q_mm"), b, name="q")
    heads = ops.transpose(ops.reshape(q, (7, 2, 3), name="q_split"), (1, 0, 2), name="q_heads")
    keys = ops.transpose(heads, (0, 2, 1), name="k_t")
    scores = ops.batch_matmul(heads, keys, name="scores")
    probs = ops.softmax(ops.scale(scores, 0.5, name="scaled"), axis=-1, name="probs")
    return tc.Graph.from_outputs([ops.batch_matmul(probs, heads, name="context")])


def test_softmax_and_head_split_fold_contraction_operands_stay():
    graph = _attention_tail()
    after = inline_elementwise(graph)
    names = [t.name for t in after.computes]
    # read by batch matmuls: kept; the bias add and reshape fold into the head split, the
    # scale into the softmax's max and subtract, the subtract into the exp
    for kept in ("q_mm", "q_heads", "k_t", "scores", "probs", "context"):
        assert kept in names
    for gone in ("q", "q_split", "scaled", "probs_sub"):
        assert gone not in names
    assert "probs_exp" in names  # exp read by the sum and the division: not computed twice
    assert "scores" in {t.name for t in after.tensor("probs_max").inputs}
    _same_values(graph, after)


def test_outputs_reductions_and_size_one_left_alone():
    x = te.placeholder((1, 13), name="x")
    y = te.compute((1, 13), lambda i, j: x[i, j] * 2.0, name="y")  # an output, also read
    r = te.reduce_axis(13, "r")
    s = te.compute((1,), lambda i: te.sum(y[i, r], axis=[r]), name="s")
    graph = tc.Graph.from_outputs([y, s])
    assert inline_elementwise(graph) is graph


def test_a_cheap_compute_read_twice_is_copied_an_expensive_one_kept():
    x = te.placeholder((5, 11), name="x")
    c = te.constant(np.arange(11, dtype=np.float32), "float32", name="c")
    cheap = te.compute((5, 11), lambda i, j: x[i, j] + c[j], name="cheap")
    costly = te.compute((5, 11), lambda i, j: te.exp(x[i, j]), name="costly")
    out = te.compute((5, 11), lambda i, j: cheap[i, j] * cheap[i, j] + costly[i, j]
                     - costly[i, 10 - j], name="out")
    graph = tc.Graph.from_outputs([out])
    after = inline_elementwise(graph)
    assert [t.name for t in after.computes] == ["costly", "out"]
    _same_values(graph, after, seed=3)


def test_on_by_default_off_when_asked_compiled_equals_reference():
    pytest.importorskip("llvmlite")
    graph = _attention_tail()
    x = np.random.default_rng(2).standard_normal((7, 6)).astype(np.float32)
    expected = tc.reference.run(graph, x=x)
    default = tc.compile(graph, target="x86_avx512")
    off = tc.compile(graph, target="x86_avx512", passes={"inline_elementwise": False})
    assert len(default.compiled) < len(off.compiled)
    np.testing.assert_allclose(default(x), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(off(x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_typed_compute_is_rounded_where_it_was_stored(dtype):
    """float16 / bfloat16 arithmetic runs unrounded in float32 inside a compute and is rounded
    when the compute stores it: inlined, the producer's body keeps that rounding as a cast
    (which the reference and x86 honour even from the same half type), so the fused kernel
    gives the unfused result bit for bit; without the cast 15 of 37 float16 values differed."""
    pytest.importorskip("llvmlite")
    a, b, c = (te.placeholder((37,), dtype, name=n) for n in "abc")
    p = te.compute((37,), lambda i: a[i] * b[i], name="p")
    q = te.compute((37,), lambda i: p[i] / c[i], name="q")
    graph = tc.Graph.from_outputs([q])
    assert "(a[i] * b[i]))" in inline_elementwise(graph).tensor("q").statement()
    rng = np.random.default_rng(0)
    values = {n: (rng.standard_normal(37) * 3).astype(np.float32) for n in "abc"}
    if dtype == "float16":
        values = {n: v.astype(np.float16) for n, v in values.items()}
    else:
        from ml_dtypes import bfloat16
        values = {n: v.astype(bfloat16) for n, v in values.items()}
    unfused = tc.reference.run(graph, **values)
    fused = tc.compile(graph, target="x86_avx512")
    assert len(fused.compiled) == 1
    np.testing.assert_array_equal(np.asarray(fused(**values), np.float32),
                                  np.asarray(unfused, np.float32))
