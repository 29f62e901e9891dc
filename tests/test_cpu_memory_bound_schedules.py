"""The CPU strategy on memory-bound computes: a short sliding window (max pooling's 3 taps) is
vectorised along the outputs, not the taps; an elementwise compute whose loads read its
trailing axes as one contiguous run gets them fused into one vector loop, leaving the
parallel loop enough iterations; so do a reduction's trailing reduce axes (a global pool); a
transposition runs in tiles of the lanes.
Schedules, and x86 results against the reference on awkward shapes."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.lower import LoweringOptions
from tilecraft.reference import run
from tilecraft.schedule.strategies.base import schedule_with_strategy
from tilecraft.target.registry import get_target

OPTIONS = LoweringOptions(vector_lanes=16, cores=2)

needs_x86 = pytest.mark.skipif(not get_target("x86_avx512").available().execute,
                               reason="x86_avx512 cannot execute on this machine")


def _describe(tensor: te.Tensor, options: LoweringOptions = OPTIONS) -> str:
    return schedule_with_strategy(tensor, options)[tensor].describe()


def test_max_pooling_is_vectorised_along_its_outputs():
    x = te.placeholder((1, 8, 23, 23), name="x")
    pooled = ops.max_pool2d(x, 3, stride=2, padding=1, name="p")
    assert "w: vector(12, lanes=16)" in _describe(pooled)


def test_long_rows_stay_row_reductions():
    x = te.placeholder((6, 40), name="x")
    k = te.reduce_axis(40, "k")
    total = te.compute((6,), lambda i: te.sum(x[i, k], axis=k), name="t")
    assert "k: vector(40" in _describe(total)
    window = te.reduce_axis(3, "r")  # three taps but only two outputs per row: taps stay
    few = te.compute((6, 2), lambda i, j: te.max(x[i, j * 3 + window], axis=window), name="f")
    assert "r: vector(3" in _describe(few)


def test_a_window_read_across_rows_stays_a_row_reduction():
    x = te.placeholder((30, 8), name="x")
    r = te.reduce_axis(8, "r")  # out[j] reads the column j: j steps whole rows
    out = te.compute((30,), lambda j: te.max(x[j, r], axis=r), name="o")
    assert "r: vector(8" in _describe(out)


def test_contiguous_trailing_axes_are_one_vector_loop():
    a = te.placeholder((1, 64, 7, 11), name="a")
    b = te.placeholder((64,), name="b")
    row = te.placeholder((1, 64, 1, 11), name="row")
    biased = te.compute(a.shape, lambda n, c, h, w: a[n, c, h, w] + b[c], name="biased")
    assert _describe(biased).endswith("c: parallel(64) > h_w: vector(77, lanes=16)")
    # all of (c, h, w) would leave no parallel loop: c stays outside
    plain = te.compute(a.shape, lambda n, c, h, w: a[n, c, h, w] * 2.0, name="plain")
    assert _describe(plain).endswith("c: parallel(64) > h_w: vector(77, lanes=16)")
    # without threads everything fuses
    serial = LoweringOptions(vector_lanes=16, cores=1, parallel=False)
    assert "c_h_w: vector(4928" in _describe(plain, serial)
    # a load broadcast along h, a transposed read, a padded read: no fusion
    broadcast = te.compute(a.shape, lambda n, c, h, w: a[n, c, h, w] + row[n, c, 0, w],
                           name="broadcast")
    assert "h: serial(7) > w: vector(11" in _describe(broadcast)
    square = te.placeholder((1, 64, 11, 11), name="square")
    transposed = te.compute(square.shape, lambda n, c, h, w: square[n, c, w, h], name="t")
    assert "w: vector(11" in _describe(transposed)
    padded = ops.pad(a, [(0, 0), (0, 0), (1, 1), (1, 1)], name="padded")
    assert "i3: vector(13" in _describe(padded)


def test_contiguous_reduce_axes_are_one_vector_reduction():
    a = te.placeholder((1, 64, 7, 5), name="a")
    b = te.placeholder((64,), name="b")
    rh, rw = te.reduce_axis(7, "rh"), te.reduce_axis(5, "rw")
    pooled = te.compute((1, 64, 1, 1), lambda n, c, h, w: te.sum(
        te.max(a[n, c, rh, rw] + b[c], 0.0), axis=[rh, rw]), name="pooled")
    options = LoweringOptions(vector_lanes=16, cores=2, unroll_limit=8)
    assert _describe(pooled, options).endswith("c: parallel(64) > rh_rw: vector(35, lanes=16)")
    column = te.reduce_axis(7, "rh")  # rows apart: stays a short vector, rh unrolled
    columns = te.compute((64, 5), lambda c, w: te.sum(a[0, c, column, w], axis=column),
                         name="columns")
    assert "rh: unrolled(7, factor=7) > w: vector(5" in _describe(columns, options)
    # a padded window (bounds guards on rh, rw) over rows as wide as the window: not fused
    x = te.placeholder((1, 4, 2, 3), name="x")
    wh, ww = te.reduce_axis(3, "wh"), te.reduce_axis(3, "ww")
    inside = te.all_of(wh >= 1, wh < 3, ww >= 1)
    window = te.compute((1, 4, 1, 1), lambda n, c, h, w: te.max(
        te.select(inside, x[n, c, wh - 1, ww - 1], -1e30), axis=[wh, ww]), name="window")
    assert "wh_ww" not in _describe(window, options)


def test_a_transposition_runs_in_tiles():
    q = te.placeholder((512, 768), name="q")
    keys = ops.transpose(ops.reshape(q, (512, 12, 64)), (1, 2, 0), name="keys")
    assert _describe(keys) == ("i0: parallel(12) > i2.outer: serial(32) > i1: serial(64) > "
                               "i2.inner: vector(16, lanes=16)")
    x = te.placeholder((37, 53), name="x")
    assert _describe(ops.transpose(x, (1, 0), name="t")) == (
        "i1.outer: parallel(3) > i0: serial(53) > i1.inner: vector(16, lanes=16)")
    short = te.placeholder((17, 5), name="short")  # 17 outputs per row: no room for tiles
    assert _describe(ops.transpose(short, (1, 0), name="s")).endswith("i1: vector(17, lanes=16)")


@needs_x86
@pytest.mark.parametrize(("shape", "perm"), [((37, 53), (1, 0)), ((3, 40, 50), (0, 2, 1)),
                                             ((17, 5), (1, 0)), ((5, 16, 33), (2, 0, 1)),
                                             ((1, 32), (1, 0)), ((32, 1), (1, 0))])
def test_transpositions_match_the_reference(shape, perm):
    x = te.placeholder(shape, name="x")
    out = ops.transpose(x, perm, name="t")
    graph = tc.Graph.from_outputs([out])
    data = {"x": np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)}
    from tilecraft_x86_avx512.target import X86Avx512Target

    for threads in (1, 2):
        exe = tc.compile(graph, target=X86Avx512Target(threads=threads))
        np.testing.assert_array_equal(exe(**data), run(graph, data))


@needs_x86
@pytest.mark.parametrize("shape", [(1, 3, 13, 11), (2, 5, 7, 7), (1, 1, 2, 3), (1, 2, 1, 1),
                                   (1, 17, 5, 1)])
def test_memory_bound_computes_match_the_reference(shape):
    x = te.placeholder(shape, name="x")
    b = te.placeholder((shape[1],), name="b")
    y = te.placeholder(shape, name="y")
    outputs = [
        ops.max_pool2d(ops.relu(x), 3, stride=2, padding=1, name="pooled"),
        *([ops.max_pool2d(x, 2, name="pooled2")] if min(shape[2:]) >= 2 else []),
        te.compute(shape, lambda n, c, h, w: te.max(x[n, c, h, w] + b[c] + y[n, c, h, w], 0.0),
                   name="residual"),
        te.compute(shape, lambda n, c, h, w: te.min(te.max(x[n, c, h, w], 0.0), 6.0),
                   name="relu6"),
        ops.global_avg_pool2d(te.compute(shape, lambda n, c, h, w: te.max(
            x[n, c, h, w] + b[c], 0.0), name="activated"), name="global"),
    ]
    rng = np.random.default_rng(sum(shape))
    for out in outputs:
        graph = tc.Graph.from_outputs([out])
        inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32)
                  for t in graph.inputs}
        for threads in (1, 2):
            from tilecraft_x86_avx512.target import X86Avx512Target

            exe = tc.compile(graph, target=X86Avx512Target(threads=threads))
            np.testing.assert_allclose(exe(**inputs), run(graph, inputs), rtol=1e-6, atol=1e-6)
