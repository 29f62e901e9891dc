"""Elementwise epilogues fused into the x86 contraction template (blocking/epilogue.py): a GEMM or
convolution and its elementwise consumer as one kernel, against the reference on awkward
shapes, and the consumers that must stay apart."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tilecraft_x86_avx512.blocking.block_packed import lower_block_packed
from tilecraft_x86_avx512.blocking.epilogue import Epilogue, epilogue_pairs
from tilecraft_x86_avx512.blocking.register_tiles import Blocking, lower_contraction
from tilecraft_x86_avx512.host import CacheLevel, HostInfo
from tilecraft_x86_avx512.microkernels import OUTER_PRODUCT_F32, OUTER_PRODUCT_F32_ROWS
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import as_contraction
from tilecraft.reference import run

SQRT_HALF = 1 / math.sqrt(2.0)


def _gelu(x):
    return x * 0.5 * (1.0 + te.erf(x * SQRT_HALF))


def _inputs(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}


def _compiled(out, threads=2, host=None, seed=0, rtol=2e-4, atol=2e-4):
    graph = Graph.from_outputs(out if isinstance(out, list) else [out])
    exe = tc.compile(graph, target=X86Avx512Target(threads=threads, host=host))
    arrays = _inputs(graph, seed)
    got, want = exe(**arrays), run(graph, arrays)
    for g, w in zip(got if isinstance(got, tuple) else [got],
                    want if isinstance(want, tuple) else [want]):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return exe


def _fused(exe, producer: str, consumer: str) -> dict:
    """The attributes of the kernel computing ``consumer`` as ``producer``'s epilogue; no
    kernel of ``producer`` is left."""
    names = [k.name for k in exe.kernels]
    assert producer not in names and names.count(consumer) == 1, names
    kernel = exe.kernels[names.index(consumer)]
    assert kernel.attrs["fused"] == [producer, consumer]
    assert "epilogue" in kernel.attrs["schedule"]
    return kernel.attrs


def _l2_host(l2_bytes: int) -> HostInfo:
    """A made-up host (test figures, no real CPU's) with ``l2_bytes`` of L2."""
    return HostInfo("test CPU", 2, 3.0e9, "test", (CacheLevel("L1", 49152, False),
                    CacheLevel("L2", l2_bytes, False), CacheLevel("L3", 32 << 20, True)),
                    frozenset({"avx512f"}), fma_flops_per_core=100e9, l3_bytes_per_second=50e9)


def _small_l2_host() -> HostInfo:
    """A host whose 64 KB L2 makes the template cut K into several KC slices."""
    return _l2_host(65536)


# ---- fused, end to end -------------------------------------------------------------------------

@pytest.mark.parametrize(("m", "n", "k"), [(97, 61, 89), (512, 300, 64), (4, 131, 70),
                                           (37, 4, 250)])
def test_matmul_bias_gelu_is_one_kernel(m, n, k):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    bias = te.placeholder((n,), name="bias")
    C = ops.matmul(A, B, name="C")
    E = te.compute(C.shape, lambda i, j: _gelu(C[i, j] + bias[j]), name="E")
    exe = _compiled(E, seed=m + n + k)
    _fused(exe, "C", "E")
    # the fused kernel, after B's packing unless it reads B in place
    in_place = "B read in place" in exe.kernels[-1].attrs["schedule"]
    assert len(exe.kernels) == (1 if in_place else 2)


def test_ops_bias_gelu_after_dense_is_folded_then_fused():
    x = te.placeholder((64, 96), name="x")
    w = te.placeholder((160, 96), name="w")
    b = te.placeholder((160,), name="b")
    y = ops.gelu(ops.bias_add(ops.dense(x, w, name="d"), b, axis=1, name="db"), name="act")
    exe = _compiled(y, seed=3)
    assert [k.name for k in exe.kernels if not k.attrs.get("role")] == ["act"]
    assert exe.kernels[-1].attrs["fused"][0] == "d"
    assert any(note.startswith("fused d -> act") for note in exe.report.notes)


def test_matmul_plus_residual():
    A = te.placeholder((83, 71), name="A")
    B = te.placeholder((71, 113), name="B")
    R = te.placeholder((83, 113), name="R")
    C = ops.matmul(A, B, name="C")
    E = te.compute(C.shape, lambda i, j: C[i, j] + R[i, j], name="E")
    attrs = _fused(_compiled(E, seed=5), "C", "E")
    assert "A read in place" in attrs["schedule"]


def test_a_block_epilogue_keeps_its_block_of_c_in_l2():
    """A tall matmul with a residual epilogue: its rows come in blocks whose C (MC x NR) is
    an eighth of L2 at most (epilogue_rows), so the epilogue reads them back from cache."""
    host = _small_l2_host()                      # 64 KB of L2: blocks of at most 30 rows
    A = te.placeholder((257, 64), name="A")
    B = te.constant(np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32),
                    name="B")
    R = te.placeholder((257, 64), name="R")
    C = ops.matmul(A, B, name="C")
    E = te.compute(C.shape, lambda i, j: te.max(C[i, j] + R[i, j], 0.0), name="E")
    attrs = _fused(_compiled(E, threads=1, host=host, seed=2), "C", "E")
    mc = int(attrs["schedule"].split(" MC=")[1].split(",")[0])
    assert mc * 64 * 4 <= 65536 // 8 and mc >= 6


@pytest.mark.parametrize(("n", "whole"), [(150, True), (1000, False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_one_slice_epilogue_runs_over_whole_rows_where_they_fit(n, whole, threads):
    """One reduction slice, A read in place: the residual epilogue runs once per block over
    all N columns (whole_row_rows: the block's C an eighth of a 256 KB L2, with every panel of
    B half of it); with 1000 columns the panels alone pass that half and it runs per panel."""
    A = te.placeholder((301, 40), name="A")
    B = te.constant(np.random.default_rng(4).standard_normal((40, n)).astype(np.float32),
                    name="B")
    R = te.placeholder((301, n), name="R")
    C = ops.matmul(A, B, name="C")
    E = te.compute(C.shape, lambda i, j: te.max(C[i, j] + R[i, j], 0.0), name="E")
    attrs = _fused(_compiled(E, threads=threads, host=_l2_host(1 << 18), seed=n), "C", "E")
    assert ("block of whole rows" in attrs["schedule"]) == whole, attrs["schedule"]
    mc = int(attrs["schedule"].split(" MC=")[1].split(",")[0])
    assert mc * (n if whole else 64) * 4 <= (1 << 18) // 8


@pytest.mark.parametrize(("size", "threads"), [((29, 23), 1), ((13, 11), 2)])
def test_conv_bias_relu(size, threads):
    x = te.placeholder((1, 16, *size), name="x")
    w = te.placeholder((24, 16, 3, 3), name="w")
    b = te.placeholder((24,), name="b")
    y = ops.relu(ops.bias_add(ops.conv2d(x, w, padding=1, name="conv"), b, name="biased"),
                 name="y")
    exe = _compiled(y, threads=threads, seed=threads)
    attrs = _fused(exe, "conv", "y")
    # 667 pixels: 11 panels of 64, B packed per block inside the kernel; 143: 3 panels, first
    assert ("B packed per block" in attrs["schedule"]) == (size[0] == 29), attrs["schedule"]


def test_batched_conv_residual_relu():
    x = te.placeholder((2, 8, 13, 11), name="x")
    w = te.placeholder((20, 8, 3, 3), name="w")
    r = te.placeholder((2, 20, 13, 11), name="r")
    conv = ops.conv2d(x, w, padding=1, name="conv")
    y = te.compute(conv.shape, lambda n, k, h, ww: te.max(conv[n, k, h, ww] + r[n, k, h, ww],
                                                          0.0), name="y")
    _fused(_compiled(y, seed=11), "conv", "y")


def test_batch_one_conv_residual_read_at_index_zero():
    """Batch-1 networks read the extent-1 batch axis as 0 (``conv[0, k, h, w]``): still the
    consumer's own index."""
    x = te.placeholder((1, 8, 15, 14), name="x")
    w = te.placeholder((20, 8, 3, 3), name="w")
    r = te.placeholder((1, 20, 15, 14), name="r")
    b = te.placeholder((20,), name="b")
    conv = ops.conv2d(x, w, padding=1, name="conv")
    y = te.compute(conv.shape, lambda n, k, h, ww: te.max(
        conv[0, k, h, ww] + b[k] + r[0, k, h, ww], 0.0), name="y")
    _fused(_compiled(y, seed=19), "conv", "y")


def test_batched_matmul_scale():
    X = te.placeholder((3, 37, 29), name="X")
    Y = te.placeholder((3, 29, 41), name="Y")
    Z = ops.batch_matmul(X, Y, name="Z")
    s = te.compute(Z.shape, lambda b, i, j: Z[b, i, j] * 0.125, name="s")
    _fused(_compiled(s, seed=13), "Z", "s")


@pytest.mark.parametrize(("m", "n", "k"), [(31, 67, 307), (7, 5, 1009)])
def test_several_kc_slices_apply_the_epilogue_once(m, n, k):
    """With a 64 KB L2 the template cuts K into slices: the epilogue (not idempotent: + bias)
    must run after the last one only."""
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    bias = te.placeholder((n,), name="bias")
    C = ops.matmul(A, B, name="C")
    E = te.compute(C.shape, lambda i, j: C[i, j] * 2.0 + bias[j], name="E")
    attrs = _fused(_compiled(E, threads=1, host=_small_l2_host(), seed=k), "C", "E")
    slices = int(attrs["schedule"].split("k-slices(")[1].split(")")[0])
    assert slices > 1, attrs["schedule"]


def test_conv_with_several_kc_slices():
    x = te.placeholder((1, 64, 9, 10), name="x")
    w = te.placeholder((12, 64, 3, 3), name="w")
    b = te.placeholder((12,), name="b")
    y = ops.relu(ops.bias_add(ops.conv2d(x, w, padding=1, name="conv"), b, name="biased"),
                 name="y")
    attrs = _fused(_compiled(y, threads=1, host=_small_l2_host(), seed=17), "conv", "y")
    assert "k-slices(1)" not in attrs["schedule"], attrs["schedule"]


def test_a_cast_is_fused_through_a_local_tile():
    C = _matmul()
    E = te.compute(C.shape, lambda i, j: te.cast("float16", C[i, j] * 0.5), name="E")
    attrs = _fused(_compiled(E, atol=1e-2, rtol=1e-3), "C", "E")
    assert "(local tile)" in attrs["schedule"]


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize(("s", "heads", "d"), [(64, 4, 16), (37, 3, 20)])
def test_a_split_into_heads_is_fused(s, heads, d, transposed):
    """BERT's Q/V: ``[s, heads*d]`` + bias split into ``[heads, s, d]``, written from a local
    tile at the index each element goes to; K's ``[heads, d, s]`` (transposed: scattered
    stores) stays apart."""
    x = te.placeholder((s, 48), name="x")
    w = te.placeholder((heads * d, 48), name="w")
    b = te.placeholder((heads * d,), name="b")
    C = ops.dense(x, w, name="C")
    if transposed:
        E = te.compute((heads, d, s), lambda h, j, i: C[i, h * d + j] + b[h * d + j], name="E")
    else:
        E = te.compute((heads, s, d), lambda h, i, j: C[i, h * d + j] + b[h * d + j], name="E")
    exe = _compiled(E, seed=s + d)
    if transposed:
        _unfused(exe, "C", "transposes C")
        return
    assert "(local tile)" in _fused(exe, "C", "E")["schedule"]


# ---- left unfused, still right -----------------------------------------------------------------

def _unfused(exe, producer: str, why: str) -> None:
    assert producer in [k.name for k in exe.kernels]
    assert not any(k.attrs.get("fused") for k in exe.kernels)
    assert any(why in note for note in exe.report.notes), exe.report.notes


def _matmul(m=45, n=70, k=33):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    return ops.matmul(A, B, name="C")


def test_a_shifted_read_is_not_fused():
    C = _matmul()
    E = te.compute(C.shape, lambda i, j: C[i, 69 - j] + 1.0, name="E")
    _unfused(_compiled(E), "C", "another index than its own")


def test_a_reduction_is_not_fused():
    C = _matmul()
    j = te.reduce_axis(70, "j")
    E = te.compute((45,), lambda i: te.sum(C[i, j], axis=j), name="E")
    _unfused(_compiled(E), "C", "is a reduction")


def test_a_contraction_that_is_also_an_output_is_not_fused():
    C = _matmul()
    E = te.compute(C.shape, lambda i, j: C[i, j] * 3.0, name="E")
    _unfused(_compiled([E, C]), "C", "also a graph output")


def test_a_cast_with_several_kc_slices_is_not_fused():
    C = _matmul(31, 67, 307)
    E = te.compute(C.shape, lambda i, j: te.cast("float16", C[i, j]), name="E")
    _unfused(_compiled(E, threads=1, host=_small_l2_host(), atol=2e-2, rtol=2e-3), "C",
             "needs the reduction in one KC slice")


def test_a_contraction_read_by_two_computes_is_not_fused():
    C = _matmul()
    E = te.compute(C.shape, lambda i, j: C[i, j] * 3.0, name="E")
    F = te.compute(C.shape, lambda i, j: C[i, j] + E[i, j], name="F")
    _unfused(_compiled([E, F]), "C", "also read by")


@pytest.mark.parametrize("shape", [(1, 64, 50), (50, 64, 1)])
def test_a_matrix_vector_product_stays_on_the_default_loop_nest(shape):
    m, k, n = shape
    C = _matmul(m, n, k)
    E = te.compute(C.shape, lambda i, j: te.max(C[i, j], 0.0), name="E")
    graph = Graph.from_outputs([E])
    assert epilogue_pairs(graph) == []
    _compiled(E)


# ---- the lowering itself, with explicit blockings ----------------------------------------------

def _run_lowered(kernels, graph, native, seed):
    arrays = _inputs(graph, seed)
    values = dict(arrays)
    for producer in graph.computes[:-2]:  # e.g. a convolution's pad
        values[producer.name] = run(producer, {t.name: arrays[t.name]
                                               for t in Graph.from_outputs([producer]).inputs})
    for kernel in kernels:
        given = {}
        for p in kernel.params:
            if p.name in values:
                given[p.name] = values[p.name].reshape(p.shape)
            else:
                given[p.name] = np.zeros(p.shape, p.dtype.numpy)
        native.compile_kernel(kernel)(given)
        for name in kernel.outputs:
            values[name] = given[name]
    out = graph.outputs[0]
    np.testing.assert_allclose(values[out.name].reshape(out.shape), run(graph, arrays),
                               rtol=2e-4, atol=2e-4)


BLOCKINGS = [Blocking(mi=4, nr=32, kc=16, mc=8), Blocking(mi=4, nr=32, kc=16, mc=8, pack_a=False),
             Blocking(mi=6, nr=16, kc=7, mc=12, pack_a=False)]


@pytest.mark.parametrize("per_tile", [False, True])
@pytest.mark.parametrize("blocking", BLOCKINGS)
@pytest.mark.parametrize(("m", "n", "k"), [(1, 37, 41), (13, 1, 29), (23, 45, 50), (5, 80, 3)])
def test_lowered_epilogue_on_ragged_tiles_and_slices(m, n, k, blocking, per_tile, native):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    bias = te.placeholder((n,), name="bias")
    R = te.placeholder((m, n), name="R")
    C = ops.matmul(A, B, name="C")
    E = te.compute(C.shape, lambda i, j: te.max(C[i, j] + bias[j] - R[i, j], 0.0), name="E")
    contraction = as_contraction(C)
    if contraction is None:
        pytest.skip("a matrix-vector product is not a contraction")
    options = LoweringOptions(vector_lanes=16, cores=2)
    epilogue = Epilogue(contraction, E, options, per_tile=per_tile)
    kernels = lower_contraction(contraction, OUTER_PRODUCT_F32.name, blocking, options,
                                rows_micro_kernel=OUTER_PRODUCT_F32_ROWS.name,
                                epilogue=epilogue)
    assert kernels[-1].name == "E" and "C" not in [p.name for p in kernels[-1].params]
    assert ("each tile" in kernels[-1].attrs["schedule"]) == per_tile
    _run_lowered(kernels, Graph.from_outputs([E]), native, m * n + k)


@pytest.mark.parametrize("blocking", [Blocking(mi=4, nr=32, kc=64, mc=8, pack_a=False),
                                      Blocking(mi=6, nr=16, kc=64, mc=12, pack_a=False),
                                      Blocking(mi=4, nr=32, kc=64, mc=8),
                                      Blocking(mi=6, nr=16, kc=7, mc=12, pack_a=False)])
@pytest.mark.parametrize(("m", "n", "k"), [(1, 37, 41), (23, 45, 50), (29, 16, 3)])
def test_lowered_whole_row_epilogue(m, n, k, blocking, native):
    """The epilogue over a block's whole rows after its last panel, on ragged strips, panels
    and blocks; asked for where A is packed or K takes several slices, it runs per panel."""
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    R = te.placeholder((m, n), name="R")
    C = ops.matmul(A, B, name="C")
    E = te.compute(C.shape, lambda i, j: te.max(C[i, j] * 0.5 - R[i, j], 0.0), name="E")
    contraction = as_contraction(C)
    options = LoweringOptions(vector_lanes=16, cores=2)
    epilogue = Epilogue(contraction, E, options, whole_rows=True)
    kernels = lower_contraction(contraction, OUTER_PRODUCT_F32.name, blocking, options,
                                rows_micro_kernel=OUTER_PRODUCT_F32_ROWS.name,
                                epilogue=epilogue)
    schedule = kernels[-1].attrs["schedule"]
    in_place = "A read in place" in schedule      # (a 1-row A is packed whatever is asked)
    assert in_place == (not blocking.pack_a and m > 1)
    assert ("whole rows" in schedule) == (in_place and k <= blocking.kc)
    _run_lowered(kernels, Graph.from_outputs([E]), native, m * n + k)


LOCAL_BLOCKINGS = [Blocking(mi=4, nr=32, kc=64, mc=8), Blocking(mi=6, nr=16, kc=64, mc=12,
                                                               pack_a=False)]


@pytest.mark.parametrize("blocking", LOCAL_BLOCKINGS)
@pytest.mark.parametrize(("m", "heads", "d"), [(1, 3, 7), (13, 2, 17), (23, 5, 16)])
def test_lowered_head_split_on_ragged_tiles(m, heads, d, blocking, native):
    A = te.placeholder((m, 40), name="A")
    B = te.placeholder((40, heads * d), name="B")
    C = ops.matmul(A, B, name="C")
    E = te.compute((heads, m, d), lambda h, i, j: C[i, h * d + j] * 2.0, name="E")
    contraction = as_contraction(C)
    options = LoweringOptions(vector_lanes=16, cores=2)
    epilogue = Epilogue(contraction, E, options, (blocking.mi, blocking.nr))
    assert epilogue.local is not None
    kernels = lower_contraction(contraction, OUTER_PRODUCT_F32.name, blocking, options,
                                rows_micro_kernel=OUTER_PRODUCT_F32_ROWS.name,
                                epilogue=epilogue)
    _run_lowered(kernels, Graph.from_outputs([E]), native, m + d)


def test_a_local_tile_refuses_several_slices():
    A = te.placeholder((20, 100), name="A")
    B = te.placeholder((100, 30), name="B")
    C = ops.matmul(A, B, name="C")
    E = te.compute((30, 20), lambda j, i: C[i, j], name="E")
    contraction = as_contraction(C)
    options = LoweringOptions(vector_lanes=16)
    with pytest.raises(LoweringError, match="one KC slice, the blocking cuts it into 2"):
        lower_contraction(contraction, OUTER_PRODUCT_F32.name, Blocking(mi=4, nr=16, kc=50,
                                                                        mc=8), options,
                          epilogue=Epilogue(contraction, E, options, (4, 16)))


@pytest.mark.parametrize("per_tile", [False, True])
@pytest.mark.parametrize("panels", [1, 3])
def test_lowered_block_packed_conv_epilogue(panels, per_tile, native):
    x = te.placeholder((2, 5, 9, 7), name="x")
    w = te.placeholder((11, 5, 3, 3), name="w")
    b = te.placeholder((11,), name="b")
    conv = ops.conv2d(x, w, padding=1, name="conv")
    y = te.compute(conv.shape, lambda n, c, h, ww: te.min(te.max(conv[n, c, h, ww] + b[c], 0.0),
                                                          6.0), name="y")
    contraction = as_contraction(conv, broadcast_batch=True)
    options = LoweringOptions(vector_lanes=16, cores=2)
    kernels = lower_block_packed(contraction, OUTER_PRODUCT_F32_ROWS.name,
                                 Blocking(mi=4, nr=16, kc=16, mc=8, pack_a=False), panels,
                                 options, epilogue=Epilogue(contraction, y, options,
                                                            per_tile=per_tile))
    assert kernels is not None and [k.name for k in kernels] == ["y"]
    _run_lowered(kernels, Graph.from_outputs([y]), native, panels)
