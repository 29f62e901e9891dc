"""Contractions lowered onto a register-tile micro-kernel match the reference (interpreted)."""

import numpy as np
import pytest
from tilecraft_x86_avx512.blocking.register_tiles import Blocking, lower_contraction

from tilecraft import ops, te
from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import as_contraction
from tilecraft.reference import run
from tilecraft.target.microkernel import MicroKernelDecl

OUTER = MicroKernelDecl(
    name="outer", semantics="C[m, n] += A[k, m] * B[k, n]", template="t/outer.jinja",
    loops=[{"name": "m", "extent": "MV", "kind": "spatial"},
           {"name": "n", "extent": "NC", "kind": "spatial"},
           {"name": "k", "extent": "KI", "kind": "reduce"}],
    operands=[{"name": "A", "role": "src", "dtype": "float32", "shape": ["KI", "MV"],
               "index": ["k", "m"]},
              {"name": "B", "role": "src", "dtype": "float32", "shape": ["KI", "NC"],
               "index": ["k", "n"]},
              {"name": "C", "role": "dst", "dtype": "float32", "shape": ["MV", "NC"],
               "index": ["m", "n"]}],
    parameters={"MI": {"default": 2}, "NR": {"default": 4}, "KI": {"default": 3},
                "MV": {"default": 2}, "NC": {"default": 4}})

OPTIONS = LoweringOptions(vector_lanes=4, cores=2)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def _run(tensor, blocking, rng):
    contraction = as_contraction(tensor)
    assert contraction is not None
    kernels = lower_contraction(contraction, "outer", blocking, OPTIONS)
    graph = Graph.from_outputs([tensor])
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    arrays = dict(inputs)
    for producer in graph.computes[:-1]:  # e.g. a convolution's pad
        arrays[producer.name] = run(producer, {t.name: inputs[t.name]
                                               for t in Graph.from_outputs([producer]).inputs})
    expected = {tensor.name: run(tensor, inputs)}
    c_view = kernels[-1].params[-1]
    arrays[tensor.name] = np.zeros(c_view.shape, np.float32)
    out = run_kernels(kernels, arrays, semantics={"outer": OUTER.reference})
    np.testing.assert_allclose(out[tensor.name].reshape(tensor.shape), expected[tensor.name],
                               rtol=1e-5, atol=1e-5)
    return kernels


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (2, 4, 3), (7, 9, 11), (13, 5, 2), (5, 17, 1)])
@pytest.mark.parametrize("blocking", [Blocking(mi=2, nr=4, kc=3, mc=4),
                                      Blocking(mi=3, nr=8, kc=64, mc=3)])
def test_matmul_awkward_shapes(m, n, k, blocking, rng):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    if m == 1 and n == 1:
        assert as_contraction(ops.matmul(A, B)) is None  # a dot product: nothing to tile
        return
    _run(ops.matmul(A, B, name="C"), blocking, rng)


def test_batch_matmul_dense_and_conv(rng):
    X = te.placeholder((3, 5, 7), name="X")
    Y = te.placeholder((3, 7, 6), name="Y")
    _run(ops.batch_matmul(X, Y, name="Z"), Blocking(mi=2, nr=4, kc=4, mc=2), rng)
    D = te.placeholder((5, 7), name="D")
    W = te.placeholder((9, 7), name="W")
    _run(ops.dense(D, W, name="E"), Blocking(mi=2, nr=4, kc=5, mc=4), rng)
    image = te.placeholder((1, 3, 7, 6), name="image")
    weight = te.placeholder((5, 3, 3, 3), name="weight")
    conv = ops.conv2d(image, weight, padding=1, name="conv")
    c = as_contraction(conv)
    assert [a.name for a in c.n_axes] == ["h", "w"] and len(c.k_axes) == 3
    _run(conv, Blocking(mi=2, nr=8, kc=10, mc=4), rng)


def test_blocking_errors():
    with pytest.raises(LoweringError, match="mc = 5 must be a multiple of mi = 2"):
        Blocking(mi=2, nr=4, kc=3, mc=5)
    with pytest.raises(LoweringError, match="kc = 0"):
        Blocking(mi=2, nr=4, kc=0, mc=4)


@pytest.mark.parametrize("tensor_of", [
    # one ragged panel, K = 23 in three KC slices of 8: the pack zero-fills row 23
    lambda: ops.matmul(te.placeholder((7, 23), name="A"), te.placeholder((23, 5), name="B"),
                       name="C"),
    # an im2col read by rows (K = 27 taps x channels, 42 pixels in 6 panels)
    lambda: ops.conv2d(te.placeholder((1, 3, 7, 6), name="image"),
                       te.placeholder((5, 3, 3, 3), name="weight"), padding=1, name="conv"),
])
def test_few_panels_are_packed_in_pieces_of_rows(tensor_of, rng, monkeypatch):
    """With fewer panels than PACK_MIN_PIECES, the B pack splits each panel's rows into
    pieces (the last one shorter, the zero rows in it) and still gives the reference."""
    from tilecraft_x86_avx512.blocking import register_tiles

    monkeypatch.setattr(register_tiles, "PACK_MIN_ROWS", 4)
    tensor = tensor_of()
    kernels = _run(tensor, Blocking(mi=2, nr=8, kc=10, mc=4), rng)
    schedule = kernels[0].attrs["schedule"]
    assert "pieces of" in schedule, schedule
    monkeypatch.setattr(register_tiles, "PACK_MIN_PIECES", 1)
    kernels = _run(tensor, Blocking(mi=2, nr=8, kc=10, mc=4), rng)
    assert "pieces" not in kernels[0].attrs["schedule"]


def test_pack_row_chunks_cover_the_rows():
    from tilecraft_x86_avx512.blocking.register_tiles import pack_row_chunks

    for pieces in (1, 2, 3, 7, 8, 40):
        for k_total in (1, 63, 64, 127, 128, 200, 4608):
            chunks, rows = pack_row_chunks(pieces, k_total)
            assert chunks >= 1 and (chunks - 1) * rows < k_total <= chunks * rows
            assert chunks == 1 or rows >= 64
            assert pieces * chunks <= max(pieces, 8) + pieces  # never far past the goal
