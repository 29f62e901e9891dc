"""Two-step mapping generation (thesis §5.4, Fig. 5.2 e-h) and the execution of generated
mappings as Kernel IR intrinsic calls, against the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.intrin import (
    IntrinsicMapping,
    MappingError,
    ReasonKind,
    build_kernel,
    execute,
    force_mapping,
    generate,
    match,
)
from tilecraft.intrin.examples import arm_dot, ascend_cube, vpdpbusd, wmma
from tilecraft.kernel_ir.nodes import IntrinsicCall
from tilecraft.ops.conv_transpose import conv_transpose2d_zero_insert
from tilecraft.target.intrinsic import IntrinsicDecl

WMMA = wmma(16, 16, 16)
F32 = "float32"


def arrays_for(compute: te.Tensor, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    result = {}
    for tensor in tc.Graph.from_outputs([compute]).inputs:
        if tensor.dtype.is_int:
            values = rng.integers(0 if tensor.dtype.value == "uint8" else -4, 5, tensor.shape)
        else:
            values = rng.standard_normal(tensor.shape)
        result[tensor.name] = values.astype(tensor.dtype.numpy)
    return result


def check_all(compute: te.Tensor, intrinsic: IntrinsicDecl, limit: int | None = None,
              tolerance: float = 1e-4, step: int = 1) -> int:
    """Execute mappings of ``compute`` (every ``step``-th, up to ``limit``) and compare with
    the reference."""
    inputs = arrays_for(compute)
    want = tc.reference.run(compute, inputs)
    mappings = match(compute, intrinsic).mappings
    assert mappings
    chosen = mappings[::step][:limit]
    for mapping in chosen:
        got = execute(generate(compute, intrinsic, mapping), inputs)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tolerance, atol=tolerance, err_msg=str(mapping))
    return len(chosen)


def half(*shape: int, name: str) -> te.Tensor:
    return te.placeholder(shape, "float16", name=name)


def test_a_2x2x2_gemm_is_padded_onto_16x16x16() -> None:
    C = ops.matmul(half(2, 2, name="A"), half(2, 2, name="B"), out_dtype=F32, name="C")
    (mapping,) = match(C, WMMA).mappings
    physical = generate(C, WMMA, mapping)
    assert physical.intrinsic_calls == 1
    assert physical.useful_iterations == 8 and physical.executed_iterations == 4096
    assert physical.padded_iterations == 4088 and physical.utilisation == 8 / 4096
    assert [layout.grid_shape for layout in physical.layouts] == [(1, 1)] * 3
    check_all(C, WMMA)


@pytest.mark.parametrize("m,k,n", [(13, 17, 19), (1, 31, 1), (37, 5, 16)])
def test_prime_gemm_shapes_execute(m: int, k: int, n: int) -> None:
    C = ops.matmul(half(m, k, name="A"), half(k, n, name="B"), out_dtype=F32, name="C")
    check_all(C, WMMA)
    physical = generate(C, WMMA, match(C, WMMA).mappings[0])
    assert physical.intrinsic_calls == -(-m // 16) * -(-n // 16) * -(-k // 16)


def test_all_35_conv2d_mappings_compute_the_reference() -> None:
    # prime extents, stride 2 and padding (the input is read through a pad compute)
    y = ops.conv2d(half(2, 3, 7, 5, name="x"), half(5, 3, 3, 2, name="w"), stride=2, padding=1,
                   out_dtype=F32, name="y")
    assert check_all(y, wmma(4, 4, 4)) == 35
    assert check_all(y, WMMA, limit=3) == 3


def test_figure_5_2_virtual_and_physical_mapping() -> None:
    """Fig. 5.2: a 1x1x6x6 input and four 3x3 filters on a 2x2x2 Tensor Core."""
    y = ops.conv2d(half(1, 1, 6, 6, name="x"), half(4, 1, 3, 3, name="w"), out_dtype=F32,
                   name="y")
    mma = wmma(2, 2, 2)
    mapping = force_mapping(y, mma, {"i1": ["n", "h", "w"], "i2": ["k"],
                                     "r1": ["rc", "rh", "rw"]})
    physical = generate(y, mma, mapping)
    virtual = physical.virtual
    assert [(loop.name, loop.extent, loop.tiles) for loop in virtual.loops] == [
        ("i1", 16, 8), ("i2", 4, 2), ("r1", 9, 5)]
    assert virtual.outer == ()
    assert virtual.shape("Src1") == (16, 9) and virtual.shape("Src2") == (9, 4)
    assert str(virtual.loop("r1").fused_index()) == "(((rc * 9) + (rh * 3)) + rw)"
    src1 = physical.layout("Src1")
    assert src1.grid_shape == (8, 5) and src1.padded_shape == (16, 10)
    assert src1.buffer_shape == (80, 2) and src1.tile_bytes == 8
    # §5.4: tile (T_i1, T_r1) starts at (T_i1 * 5 + T_r1) * 4, elements at stride (2, 1)
    (move,) = src1.moves
    assert str(move.base) == "(((T_i1 * 5) + T_r1) * 4)"
    assert move.strides == (2, 1)
    assert [(name, str(value)) for name, value in move.parameters] == [
        ("addr_a", "(((T_i1 * 5) + T_r1) * 4)"), ("stride_a", "2")]
    assert physical.layout("Dst").level == "global"
    assert "tiles of [2, 2] in shared" in physical.summary()
    inputs = arrays_for(y)
    np.testing.assert_allclose(execute(physical, inputs), tc.reference.run(y, inputs),
                               rtol=1e-5, atol=1e-5)


def test_outer_loops_stay_around_the_intrinsic() -> None:
    y = ops.conv2d(half(2, 3, 5, 5, name="x"), half(4, 3, 3, 3, name="w"), out_dtype=F32,
                   name="y")
    mapping = force_mapping(y, WMMA, {"i1": ["n"], "i2": ["k"], "r1": ["rc"]})
    physical = generate(y, WMMA, mapping)
    assert [loop.name for loop in physical.virtual.outer] == ["h", "w", "rh", "rw"]
    assert physical.intrinsic_calls == 3 * 3 * 3 * 3
    kernel = build_kernel(physical)
    text = str(kernel)
    assert "Dst_tiles" in text and "wmma_16x16x16(" in text
    calls = [line for line in text.splitlines()
             if "wmma_16x16x16(" in line and not line.startswith("kernel")]
    assert len(calls) == 1
    assert kernel.params[-1].name == "y" and kernel.outputs == ("y",)
    inputs = arrays_for(y)
    np.testing.assert_allclose(execute(physical, inputs), tc.reference.run(y, inputs),
                               rtol=1e-5, atol=1e-5)


def test_unverified_mappings_are_not_generated() -> None:
    y = ops.conv2d(half(1, 2, 5, 5, name="x"), half(3, 2, 3, 3, name="w"), out_dtype=F32)
    good = match(y, WMMA).mappings[-1]
    n, k = y.axes[0], y.axes[1]
    wrong = IntrinsicMapping(WMMA.name, good.operands,
                             (("i1", (n, k) + y.axes[2:]), ("i2", ()),
                              ("r1", y.reduce_axes)))
    with pytest.raises(MappingError, match="fails verification") as info:
        generate(y, WMMA, wrong)
    assert {r.kind for r in info.value.reasons} == {ReasonKind.ACCESS_MATRIX}


def with_src2_strides(strides: tuple[int | str, ...]) -> IntrinsicDecl:
    moves = tuple(move.model_copy(update={"address": move.address.model_copy(
        update={"strides": strides})}) if move.operand == "Src2" else move
        for move in WMMA.memory.moves)
    return WMMA.model_copy(update={"memory": WMMA.memory.model_copy(update={"moves": moves})})


def test_fixed_strides_choose_the_tile_order_or_are_refused() -> None:
    C = ops.matmul(half(4, 20, name="A"), half(20, 4, name="B"), out_dtype=F32, name="C")
    column_major = with_src2_strides((1, "ldb"))
    physical = generate(C, column_major, match(C, column_major).mappings[0])
    (move,) = physical.layout("Src2").moves
    assert move.strides == (1, 16) and dict(move.parameters)["ldb"] == 16
    inputs = arrays_for(C)
    np.testing.assert_allclose(execute(physical, inputs), tc.reference.run(C, inputs),
                               rtol=1e-4, atol=1e-4)
    gappy = with_src2_strides((32, 1))
    with pytest.raises(MappingError, match="fixed stride 32 in dimension 0") as info:
        generate(C, gappy, match(C, gappy).mappings[0])
    assert info.value.reasons[0].kind is ReasonKind.LAYOUT
    assert info.value.reasons[0].operand == "Src2"


def test_operands_indexed_by_expressions_are_unsupported_for_generation() -> None:
    flat = IntrinsicDecl(
        name="flat_dot", compute={
            "loops": [{"name": "i", "extent": 1, "kind": "spatial"},
                      {"name": "a", "extent": 2, "kind": "reduce"},
                      {"name": "b", "extent": 2, "kind": "reduce"}],
            "operands": [
                {"name": "X", "role": "src", "dtype": "int8", "shape": [4],
                 "index": ["a * 2 + b"]},
                {"name": "Y", "role": "src", "dtype": "int8", "shape": [4],
                 "index": ["a * 2 + b"]},
                {"name": "Z", "role": "dst", "dtype": "int32", "shape": [1], "index": ["i"]}],
            "semantics": "Z[i] += cast(int32, X[a * 2 + b]) * cast(int32, Y[a * 2 + b])"},
        memory={"moves": [
            {"operand": "X", "from_level": "global", "to_level": "reg",
             "address": {"strides": [1]}},
            {"operand": "Y", "from_level": "global", "to_level": "reg",
             "address": {"strides": [1]}},
            {"operand": "Z", "from_level": "reg", "to_level": "global",
             "address": {"strides": [1]}}]},
        latency_cycles=1, throughput_per_cycle=1)
    x = te.placeholder((6, 8), "int8", name="x")
    v = te.placeholder((8,), "int8", name="v")
    y = ops.gemv(x, v)
    result = match(y, flat)
    assert result.ok  # matching reads the access structure only
    with pytest.raises(MappingError, match="indexed by one intrinsic loop") as info:
        generate(y, flat, result.mappings[0])
    assert info.value.reasons[0].kind is ReasonKind.UNSUPPORTED


def test_a_non_accumulating_intrinsic_is_summed_across_reduction_tiles() -> None:
    plain = WMMA.model_copy(update={"compute": WMMA.compute.model_copy(update={
        "semantics": "Dst[i1, i2] = sum(cast(float32, Src1[i1, r1]) * "
                     "cast(float32, Src2[r1, i2]))"})})
    assert not plain.compute.accumulates
    C = ops.matmul(half(5, 40, name="A"), half(40, 3, name="B"), out_dtype=F32, name="C")
    check_all(C, plain)


def test_conv_variants_execute_their_mappings() -> None:
    x4 = half(2, 4, 4, 3, name="x")
    mma = wmma(4, 4, 4)
    grouped = ops.conv2d(x4, half(6, 2, 3, 3, name="w"), groups=2, padding=1, out_dtype=F32)
    assert check_all(grouped, mma, step=5) == 7
    transposed = conv_transpose2d_zero_insert(x4, half(4, 3, 3, 3, name="w"), stride=2,
                                              padding=1, out_dtype=F32)
    assert check_all(transposed, mma) == 7
    gather = ops.conv_transpose2d(x4, half(4, 3, 3, 3, name="w"), padding=1, out_dtype=F32)
    assert check_all(gather, mma) == 7  # factors guarded by select(cond, x[...], 0)
    depthwise = ops.depthwise_conv2d(x4, half(4, 1, 3, 3, name="w"), dilation=2, padding=2,
                                     out_dtype=F32)
    assert check_all(depthwise, mma) == 11
    capsule = ops.capsule_conv2d(half(1, 3, 4, 4, name="x"), half(2, 3, 2, 2, 3, name="w"),
                                 out_dtype=F32)
    assert check_all(capsule, mma, limit=12) == 12


def test_half_outputs_are_rounded_once_on_store() -> None:
    C = ops.matmul(half(7, 33, name="A"), half(33, 5, name="B"), name="C")
    assert C.dtype.value == "float16"
    check_all(C, WMMA, tolerance=2e-2)


def test_other_intrinsics_execute() -> None:
    gemm = ops.matmul(half(5, 7, name="A"), half(7, 6, name="B"), out_dtype=F32)
    assert check_all(gemm, ascend_cube(2, 4)) == 8
    ints = ops.matmul(te.placeholder((3, 9), "int8", name="A"),
                      te.placeholder((9, 2), "int8", name="B"))
    assert check_all(ints, arm_dot()) == 1
    depthwise = ops.depthwise_conv2d(te.placeholder((1, 5, 4, 4), "uint8", name="x"),
                                     te.placeholder((5, 1, 3, 3), "int8", name="w"),
                                     padding=1, out_dtype="int32")
    assert check_all(depthwise, vpdpbusd(4)) == 3


def test_execute_reports_missing_inputs() -> None:
    C = ops.matmul(half(2, 3, name="A"), half(3, 2, name="B"), out_dtype=F32)
    physical = generate(C, WMMA, match(C, WMMA).mappings[0])
    with pytest.raises(tc.errors.InputError, match="input 'B' is missing"):
        execute(physical, {"A": np.zeros((2, 3), np.float16)})
    assert any(isinstance(s, IntrinsicCall) for s in _statements(build_kernel(physical).body))


def _statements(stmt):
    yield stmt
    for field in ("body", "then_body", "else_body"):
        child = getattr(stmt, field, None)
        if child is not None:
            yield from _statements(child)
    for child in getattr(stmt, "stmts", ()):
        yield from _statements(child)
