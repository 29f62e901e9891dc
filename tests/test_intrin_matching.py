"""Matching computes onto intrinsics (thesis §5.3, Fig. 5.2 b-d): candidates, basic matches,
mappings, and the mapping counts of thesis Table 5.3 for a WMMA 16x16x16 fp16 intrinsic."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import ShapeError
from tilecraft.intrin import ReasonKind, match, match_graph
from tilecraft.intrin.examples import arm_dot, ascend_cube, vpdpbusd, wmma
from tilecraft.ops.conv_transpose import conv_transpose2d_zero_insert
from tilecraft.ops.conv_variants import batched_conv2d
from tilecraft.ops.linalg import grouped_dense
from tilecraft.target.intrinsic import IntrinsicDecl

F32 = "float32"


def wmma_16x16x16() -> IntrinsicDecl:
    """The Tensor Core WMMA 16x16x16 fp16 -> fp32 declaration (Eq. 5.2 and 5.4)."""
    loops = [{"name": "i1", "extent": 16, "kind": "spatial"},
             {"name": "i2", "extent": 16, "kind": "spatial"},
             {"name": "r1", "extent": 16, "kind": "reduce"}]
    operands = [
        {"name": "Src1", "role": "src", "dtype": "float16", "shape": [16, 16],
         "index": ["i1", "r1"]},
        {"name": "Src2", "role": "src", "dtype": "float16", "shape": [16, 16],
         "index": ["r1", "i2"]},
        {"name": "Dst", "role": "dst", "dtype": "float32", "shape": [16, 16],
         "index": ["i1", "i2"]}]
    moves = [
        {"operand": "Src1", "from_level": "shared", "to_level": "fragment",
         "instruction": "load_matrix_sync",
         "address": {"base": "addr_a", "strides": ["stride_a", 1]}},
        {"operand": "Src2", "from_level": "shared", "to_level": "fragment",
         "instruction": "load_matrix_sync",
         "address": {"base": "addr_b", "strides": ["stride_b", 1]}},
        {"operand": "Dst", "from_level": "fragment", "to_level": "global",
         "instruction": "store_matrix_sync",
         "address": {"base": "addr_c", "strides": ["stride_c", 1]}}]
    return IntrinsicDecl(
        name="wmma_m16n16k16_f16", compute={
            "loops": loops, "operands": operands,
            "semantics": "Dst[i1, i2] += cast(float32, Src1[i1, r1]) * "
                         "cast(float32, Src2[r1, i2])"},
        memory={"moves": moves}, latency_cycles=32, throughput_per_cycle=0.25)


WMMA = wmma_16x16x16()


def h(*shape: int, name: str, dtype: str = "float16") -> te.Tensor:
    return te.placeholder(shape, dtype, name=name)


# operator of Table 5.3 -> (builder, mappings in the table, basic matches derived by hand)
TABLE_5_3 = {
    "GMV": (lambda: ops.gemv(h(32, 64, name="A"), h(64, name="x"), out_dtype=F32), 1, 1),
    "GMM": (lambda: ops.matmul(h(32, 64, name="A"), h(64, 48, name="B"), out_dtype=F32), 1, 1),
    "C1D": (lambda: ops.conv1d(h(2, 8, 20, name="x"), h(16, 8, 3, name="w"), out_dtype=F32),
            6, 3),
    "C2D": (lambda: ops.conv2d(h(2, 8, 10, 10, name="x"), h(16, 8, 3, 3, name="w"), padding=1,
                               out_dtype=F32), 35, 7),
    "C3D": (lambda: ops.conv3d(h(2, 4, 6, 6, 6, name="x"), h(8, 4, 3, 3, 3, name="w"),
                               out_dtype=F32), 180, 13),
    "T2D": (lambda: conv_transpose2d_zero_insert(h(2, 8, 5, 5, name="x"),
                                                 h(8, 16, 3, 3, name="w"), stride=2, padding=1,
                                                 out_dtype=F32), 7, 3),
    "GRP": (lambda: ops.conv2d(h(2, 8, 10, 10, name="x"), h(16, 2, 3, 3, name="w"), groups=4,
                               out_dtype=F32), 35, 7),
    "DIL": (lambda: ops.conv2d(h(2, 8, 10, 10, name="x"), h(16, 8, 3, 3, name="w"),
                               dilation=2, out_dtype=F32), 35, 7),
    "DEP": (lambda: ops.depthwise_conv2d(h(2, 8, 10, 10, name="x"), h(8, 1, 3, 3, name="w"),
                                         out_dtype=F32), 11, 4),
    "CAP": (lambda: ops.capsule_conv2d(h(2, 8, 10, 10, name="x"), h(16, 8, 3, 3, 4, name="w"),
                                       out_dtype=F32), 105, 14),
    "BCV": (lambda: batched_conv2d(h(2, 8, 10, 10, name="x"), h(2, 16, 8, 3, 3, name="w"),
                                   out_dtype=F32), 11, 4),
    "GFC": (lambda: grouped_dense(h(4, 2, 16, name="x"), h(2, 32, 16, name="w"),
                                  out_dtype=F32), 1, 1),
}


@pytest.mark.parametrize("operator", list(TABLE_5_3))
def test_table_5_3_mapping_counts(operator: str) -> None:
    build, mappings, basic = TABLE_5_3[operator]
    result = match(build(), WMMA)
    assert result.ok
    assert len(result.mappings) == mappings
    assert len(result.basic_matches) == basic
    keys = [m.key() for m in result.mappings]
    assert len(set(keys)) == len(keys)


def names(loops) -> list[str]:
    return [loop.name for loop in loops]


def conv2d(**kwargs) -> te.Tensor:
    return ops.conv2d(h(2, 3, 7, 7, name="x"), h(5, 3, 3, 3, name="w"), out_dtype=F32,
                      name="y", **kwargs)


def test_conv2d_candidates_and_basic_matches_follow_the_dimension_rule() -> None:
    result = match(conv2d(), WMMA)
    assert {k: names(v) for k, v in result.candidates.items()} == {
        "i1": ["n", "h", "w"], "i2": ["k"], "r1": ["rc", "rh", "rw"]}
    basic = {(m.names()["i1"][0], m.names()["r1"][0]) for m in result.basic_matches}
    # h with rh (both index the input's height) and w with rw are no basic matches
    assert basic == {("n", "rc"), ("n", "rh"), ("n", "rw"), ("h", "rc"), ("h", "rw"),
                     ("w", "rc"), ("w", "rh")}
    sets = [{k: set(v) for k, v in m.names().items()} for m in result.mappings]
    assert {"i1": {"h"}, "i2": {"k"}, "r1": {"rh"}} not in sets
    assert {"i1": {"h", "w"}, "i2": {"k"}, "r1": {"rh", "rw"}} in sets  # h-rw and w-rh
    assert {"i1": {"n", "h", "w"}, "i2": {"k"}, "r1": {"rc", "rh", "rw"}} in sets
    assert all(m.names()["i2"] == ["k"] for m in result.mappings)


def test_loops_are_fused_in_the_compute_order() -> None:
    result = match(conv2d(), WMMA)
    full = next(m for m in result.mappings if len(m.mapped) == 7)
    assert str(full) == ("wmma_m16n16k16_f16: i1 <- (n, h, w), i2 <- (k), r1 <- (rc, rh, rw) "
                         "[Src1=x, Src2=w, Dst=y]")


def test_a_loop_on_all_three_tensors_is_no_candidate() -> None:
    y = ops.batch_matmul(h(3, 5, 7, name="P"), h(3, 7, 4, name="Q"), out_dtype=F32)
    result = match(y, WMMA)
    assert {k: names(v) for k, v in result.candidates.items()} == {
        "i1": ["i"], "i2": ["j"], "r1": ["k"]}
    assert len(result.mappings) == 1
    assert "b" not in names(result.mappings[0].mapped)


def test_negative_coefficients_exclude_kernel_taps_of_transposed_conv() -> None:
    y = conv_transpose2d_zero_insert(h(1, 4, 5, 5, name="x"), h(4, 6, 3, 3, name="w"),
                                     out_dtype=F32)
    result = match(y, WMMA)
    assert names(result.candidates["r1"]) == ["rc"]
    excluded = result.correspondences[0].excluded
    assert {r.software_loop for r in excluded} == {"rh", "rw"}
    assert all(r.kind is ReasonKind.INDEX_FORM and "negative coefficient" in r.message
               for r in excluded)


def test_non_affine_indices_make_loops_opaque() -> None:
    # grouped conv: the input channel is (k // 2) * 2 + rc, so k is no candidate; rc still is
    y = ops.conv2d(h(1, 4, 6, 6, name="x"), h(4, 2, 3, 3, name="w"), groups=2, out_dtype=F32)
    result = match(y, WMMA)
    assert names(result.candidates["i2"]) == []
    assert names(result.candidates["r1"]) == ["rc", "rh", "rw"]
    assert len(result.mappings) == 35
    # core's gather-form transposed conv with stride 2 divides the output index by the stride
    t = ops.conv_transpose2d(h(1, 4, 5, 5, name="x"), h(4, 6, 3, 3, name="w"), stride=2,
                             out_dtype=F32)
    assert [str(m) for m in match(t, WMMA).mappings] == [
        f"wmma_m16n16k16_f16: i1 <- (n), i2 <- (o), r1 <- (rc) [Src1=x, Src2=w, Dst={t.name}]"]


def test_operands_read_through_pad_and_guards() -> None:
    y = conv2d(padding=1)
    factors = match(y, WMMA).correspondences[0]
    assert [b.tensor for b in factors.operands] == ["y_pad", "w", "y"]
    from tilecraft.intrin.access import analyse_compute

    product = analyse_compute(y)
    assert [f.origin.name for f in product.factors] == ["x", "w"]
    t = ops.conv_transpose2d(h(1, 4, 5, 5, name="x"), h(4, 6, 3, 3, name="w"), padding=1,
                             out_dtype=F32)
    assert len(analyse_compute(t).factors[0].guards) == 1
    assert len(match(t, WMMA).mappings) == 7


def test_symmetric_intrinsic_counts_transposed_correspondence_once() -> None:
    gemm = ops.matmul(h(20, 30, name="A"), h(30, 40, name="B"), out_dtype=F32, name="C")
    square = match(gemm, WMMA)
    assert len(square.mappings) == 1 and len(square.symmetries) == 2
    assert [len(c.mappings) for c in square.correspondences] == [1, 1]
    # a 32x8x16 shape has no symmetry: A or B on Src1 are two different mappings
    tall = match(gemm, wmma(32, 8, 16))
    assert [str(m) for m in tall.mappings] == [
        "wmma_32x8x16: i1 <- (i), i2 <- (j), r1 <- (k) [Src1=A, Src2=B, Dst=C]",
        "wmma_32x8x16: i1 <- (j), i2 <- (i), r1 <- (k) [Src1=B, Src2=A, Dst=C]"]


def test_dtypes_decide_the_correspondence() -> None:
    gemm = ops.matmul(h(4, 8, name="A", dtype="int8"), h(8, 16, name="B", dtype="uint8"),
                      out_dtype="int32", name="C")
    result = match(gemm, vpdpbusd())  # a: uint8, b: int8
    assert [str(m) for m in result.mappings] == [
        "vpdpbusd_16: i <- (), r <- (k) [a=B, b=A, acc=C]"]
    assert result.correspondences[0].rejected[0].kind is ReasonKind.DTYPE
    f32 = ops.matmul(h(4, 8, name="A", dtype="float32"), h(8, 4, name="B", dtype="float32"))
    refused = match(f32, WMMA)
    assert not refused.ok
    assert {(r.kind, r.tensor, r.operand) for r in refused.reasons} >= {
        (ReasonKind.DTYPE, "A", "Src1"), (ReasonKind.DTYPE, "B", "Src2")}
    assert "takes float16" in refused.reasons[0].message
    # half outputs accumulate in float32 (rounded once on store): they map
    assert match(ops.matmul(h(4, 8, name="A"), h(8, 4, name="B")), WMMA).ok


def test_computes_that_are_no_sum_of_products_do_not_match() -> None:
    x = h(4, 8, name="x", dtype="float32")
    for compute in (ops.relu(x), ops.reduce_max(x, axes=1), ops.softmax(x)):
        result = match(compute, WMMA)
        assert not result.ok and result.reasons
        assert result.reasons[0].kind is ReasonKind.NOT_PRODUCT_SUM
    outer = te.compute((5, 6), lambda i, j: x[i % 4, 0] * x[0, j % 8], name="outer")
    assert not match(outer, wmma(16, 16, 16, "float32", "float32")).ok


def test_outer_product_pads_the_reduction_loop() -> None:
    a, b = h(5, name="a"), h(6, name="b")
    outer = te.compute((5, 6), lambda i, j: a[i].astype(F32) * b[j].astype(F32), name="o")
    assert [str(m) for m in match(outer, WMMA).mappings] == [
        "wmma_m16n16k16_f16: i1 <- (i), i2 <- (j), r1 <- () [Src1=a, Src2=b, Dst=o]"]


def test_other_intrinsics_match_by_the_same_rule() -> None:
    gemm = ops.matmul(h(5, 7, name="A"), h(7, 6, name="B"), out_dtype=F32)
    cube = match(gemm, ascend_cube(2, 16))
    # i, j, k each go to the outer (fractal) or inner loop of their pair: 2 * 2 * 2 choices
    assert len(cube.basic_matches) == 8 and len(cube.mappings) == 8
    assert all(len(m.mapped) == 3 for m in cube.mappings)
    int_gemm = ops.matmul(h(5, 7, name="A", dtype="int8"), h(7, 6, name="B", dtype="int8"))
    dot = match(int_gemm, arm_dot())
    assert [m.names() for m in dot.mappings] == [{"i": [], "r": ["k"]}]
    depthwise = ops.depthwise_conv2d(h(1, 4, 6, 6, name="x", dtype="uint8"),
                                     h(4, 1, 3, 3, name="w", dtype="int8"), out_dtype="int32")
    lanes = match(depthwise, vpdpbusd())
    assert {k: names(v) for k, v in lanes.candidates.items()} == {"i": ["k"], "r": ["rh", "rw"]}
    assert len(lanes.mappings) == 3


def test_match_graph_reports_every_compute() -> None:
    y = ops.relu(conv2d(padding=1), name="act")
    results = match_graph(y, WMMA)
    assert list(results) == ["y_pad", "y", "act"]
    assert [r.ok for r in results.values()] == [False, True, False]


# --- the operators added for Table 5.3 -----------------------------------------------------
def test_batched_conv2d_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 7, 5)).astype(np.float32)
    w = rng.standard_normal((2, 4, 3, 3, 2)).astype(np.float32)
    y = batched_conv2d(te.placeholder(x.shape, name="x"), te.placeholder(w.shape, name="w"),
                       stride=2, padding=1)
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    want = np.zeros(y.shape)
    for p in range(y.shape[2]):
        for q in range(y.shape[3]):
            window = xp[:, :, 2 * p:2 * p + 3, 2 * q:2 * q + 2]
            want[:, :, p, q] = np.einsum("ncrs,nkcrs->nk", window, w)
    np.testing.assert_allclose(tc.reference.run(y, x=x, w=w), want, rtol=1e-5, atol=1e-5)


def test_grouped_dense_matches_numpy() -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(-3, 4, (3, 2, 5)).astype(np.int8)
    w = rng.integers(-3, 4, (2, 7, 5)).astype(np.int8)
    y = grouped_dense(te.placeholder(x.shape, "int8", name="x"),
                      te.placeholder(w.shape, "int8", name="w"))
    assert y.dtype.value == "int32"
    want = np.einsum("ngc,gkc->ngk", x.astype(np.int64), w.astype(np.int64))
    np.testing.assert_array_equal(tc.reference.run(y, x=x, w=w), want)


@pytest.mark.parametrize("stride,padding,output_padding,dilation", [
    (1, 0, 0, 1), (2, 1, 1, 1), (3, 2, 0, 2), (1, 1, 0, 1)])
def test_zero_insert_transposed_conv_equals_pytorch_semantics(stride, padding, output_padding,
                                                               dilation) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 2)).astype(np.float32)
    X, W = te.placeholder(x.shape, name="x"), te.placeholder(w.shape, name="w")
    kwargs = dict(stride=stride, padding=padding, output_padding=output_padding,
                  dilation=dilation)
    ours = conv_transpose2d_zero_insert(X, W, **kwargs)
    core = ops.conv_transpose2d(X, W, **kwargs)
    assert ours.shape == core.shape
    np.testing.assert_allclose(tc.reference.run(ours, x=x, w=w),
                               tc.reference.run(core, x=x, w=w), rtol=1e-5, atol=1e-5)


def test_amos_benchmark_operators_reject_bad_shapes() -> None:
    x = te.placeholder((2, 3, 6, 6), name="x")
    with pytest.raises(ShapeError, match=r"must be \(N, K, C, R, S\) with N=2 and C=3"):
        batched_conv2d(x, te.placeholder((1, 4, 3, 3, 3), name="w"))
    with pytest.raises(ShapeError, match=r"must be \(G, K, C\)"):
        grouped_dense(te.placeholder((2, 3, 4), name="x"), te.placeholder((3, 5, 5), name="w"))
    with pytest.raises(ShapeError, match="exceeds dilation\\*\\(kernel-1\\)"):
        conv_transpose2d_zero_insert(x, te.placeholder((3, 2, 3, 3), name="w"), padding=3)
    with pytest.raises(ShapeError, match="has 4 input channels"):
        conv_transpose2d_zero_insert(x, te.placeholder((4, 2, 3, 3), name="w"))
