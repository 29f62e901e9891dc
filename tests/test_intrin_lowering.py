"""Lowering computes through intrinsic mappings (``tilecraft.intrin.lowering``), broadcast
operands in mapping generation, and tensorization plans (``tilecraft.intrin.tensorize``) —
checked on the Kernel IR interpreter against the reference."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import InputError, LoweringError, TargetError
from tilecraft.intrin import MappingError, ReasonKind, execute, generate, match, verify
from tilecraft.intrin.examples import wmma
from tilecraft.intrin.lowering import lower_mapped
from tilecraft.intrin.perfmodel import gpu_spec_example
from tilecraft.intrin.tensorize import plan_tensorization
from tilecraft.kernel_ir.interpreter import run_kernel
from tilecraft.kernel_ir.nodes import Allocate, For, IntrinsicCall, Seq, Stmt, Store
from tilecraft.lower import LoweringOptions
from tilecraft.target.intrinsic import IntrinsicDecl

RNG = np.random.default_rng(5)


def lanes_decl(name: str, sources: list[dict], semantics: str, dst_dtype: str,
               group: int = 0) -> IntrinsicDecl:
    """A 16-lane intrinsic in the form of the x86 declarations (``intrinsics.yaml``)."""
    loops = [{"name": "i1", "extent": 16, "kind": "spatial"}]
    if group:
        loops.append({"name": "r1", "extent": group, "kind": "reduce"})
    operands = [*sources, {"name": "Dst", "role": "dst", "dtype": dst_dtype, "shape": [16],
                           "index": ["i1"]}]
    moves = [{"operand": op["name"], "from_level": "global", "to_level": "fragment",
              "address": {"strides": [1] if len(op["shape"]) == 1 else [op["shape"][1], 1]}}
             for op in operands]
    return IntrinsicDecl(name=name, compute={"loops": loops, "operands": operands,
                                             "semantics": semantics},
                         memory={"moves": moves}, latency_cycles=4, throughput_per_cycle=2)


FMA_BCAST = lanes_decl(
    "fma_bcast", [{"name": "Src1", "role": "src", "dtype": "float32", "shape": [1],
                   "index": ["0"]},
                  {"name": "Src2", "role": "src", "dtype": "float32", "shape": [16],
                   "index": ["i1"]}],
    "Dst[i1] += Src1[0] * Src2[i1]", "float32")
VNNI = lanes_decl(
    "vnni", [{"name": "Src1", "role": "src", "dtype": "uint8", "shape": [4], "index": ["r1"]},
             {"name": "Src2", "role": "src", "dtype": "int8", "shape": [16, 4],
              "index": ["i1", "r1"]}],
    "Dst[i1] += cast(int32, Src1[r1]) * cast(int32, Src2[i1, r1])", "int32", group=4)
BF16 = lanes_decl(
    "bf16dot", [{"name": "Src1", "role": "src", "dtype": "bfloat16", "shape": [2],
                 "index": ["r1"]},
                {"name": "Src2", "role": "src", "dtype": "bfloat16", "shape": [16, 2],
                 "index": ["i1", "r1"]}],
    "Dst[i1] += cast(float32, Src1[r1]) * cast(float32, Src2[i1, r1])", "float32", group=2)


def random_inputs(compute: te.Tensor) -> dict[str, np.ndarray]:
    arrays = {}
    for tensor in tc.Graph.from_outputs([compute]).inputs:
        if tensor.dtype.value == "uint8":
            arrays[tensor.name] = RNG.integers(0, 256, tensor.shape).astype(np.uint8)
        elif tensor.dtype.value == "int8":
            arrays[tensor.name] = RNG.integers(-128, 128, tensor.shape).astype(np.int8)
        else:
            arrays[tensor.name] = RNG.standard_normal(tensor.shape).astype(tensor.dtype.numpy)
    return arrays


def check_mappings(compute: te.Tensor, intrinsic: IntrinsicDecl, tolerance: float = 0.0) -> int:
    """Execute every mapping of ``compute`` on the interpreter; compare with the reference."""
    inputs = random_inputs(compute)
    want = np.asarray(tc.reference.run(compute, inputs), np.float64)
    mappings = match(compute, intrinsic).mappings
    assert mappings
    for mapping in mappings:
        got = execute(generate(compute, intrinsic, mapping), inputs)
        assert got.dtype == compute.dtype.numpy
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tolerance,
                                   atol=tolerance, err_msg=str(mapping))
    return len(mappings)


def gemm(m: int, k: int, n: int, a: str, b: str, out: str | None = None) -> te.Tensor:
    A = te.placeholder((m, k), a, name="A")
    B = te.placeholder((k, n), b, name="B")
    return ops.matmul(A, B, out_dtype=out, name="C")


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (2, 2, 2), (5, 7, 19), (17, 3, 33)])
def test_broadcast_operand_is_generated_packed_and_verified(m: int, k: int, n: int) -> None:
    C = gemm(m, k, n, "float32", "float32")
    mappings = match(C, FMA_BCAST).mappings
    assert [m.names() for m in mappings] == [{"i1": ["j"]}, {"i1": ["i"]}]
    for mapping in mappings:
        assert verify(C, FMA_BCAST, mapping).ok
        src1 = generate(C, FMA_BCAST, mapping).layout("Src1")
        assert src1.dim_loops == (0,) and src1.grid_shape == (1,) and src1.loop_dims == ()
    assert check_mappings(C, FMA_BCAST, 1e-5) == 2


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (2, 2, 2), (7, 13, 5), (16, 4, 16)])
def test_int8_gemm_through_vnni_lanes_is_exact(m: int, k: int, n: int) -> None:
    assert check_mappings(gemm(m, k, n, "uint8", "int8", "int32"), VNNI) == 1


def test_int8_conv2d_through_vnni_lanes_is_exact_for_every_mapping() -> None:
    x = te.placeholder((2, 3, 7, 7), "uint8", name="x")
    w = te.placeholder((5, 3, 3, 3), "int8", name="w")
    y = ops.conv2d(x, w, stride=2, padding=1, out_dtype="int32", name="y")
    assert check_mappings(y, VNNI) == 7  # r1 <- any non-empty subset of rc, rh, rw


@pytest.mark.parametrize(("m", "k", "n"), [(2, 2, 2), (3, 11, 18)])
def test_bf16_gemm_through_pair_lanes(m: int, k: int, n: int) -> None:
    assert check_mappings(gemm(m, k, n, "bfloat16", "bfloat16", "float32"), BF16, 1e-4) == 2


def statements(stmt: Stmt) -> list[Stmt]:
    found = [stmt]
    if isinstance(stmt, Seq):
        for child in stmt.stmts:
            found += statements(child)
    elif isinstance(stmt, (For, Allocate)):
        found += statements(stmt.body)
    return found


def test_sources_are_packed_outside_the_loops_they_do_not_use() -> None:
    C = gemm(5, 13, 17, "uint8", "int8", "int32")
    physical = generate(C, VNNI, match(C, VNNI).mappings[0])
    (kernel,) = lower_mapped(C, physical, LoweringOptions(param_level="DRAM"))
    assert kernel.name == "C_vnni" and kernel.outputs == ("C",)
    assert [b.level for b in kernel.params] == ["DRAM"] * 3
    body = kernel.body
    while isinstance(body, Allocate):
        body = body.body
    assert isinstance(body, Seq)
    pack_b, rows = body.stmts
    # B (Src2) does not depend on the row loop i: packed once, before it
    assert isinstance(pack_b, For) and not isinstance(rows, Allocate)
    assert {s.buffer.name for s in statements(pack_b) if isinstance(s, Store)} == {"Src2_tiles"}
    assert isinstance(rows, For) and rows.var.name == "i"
    calls = [s for s in statements(rows) if isinstance(s, IntrinsicCall)]
    assert len(calls) == 1 and calls[0].intrinsic == "vnni"
    arrays = random_inputs(C)
    arrays["C"] = np.zeros(C.shape, np.int32)
    run_kernel(kernel, arrays, semantics={"vnni": VNNI.reference})
    np.testing.assert_array_equal(arrays["C"], arrays["A"].astype(np.int32)
                                  @ arrays["B"].astype(np.int32))


def test_lower_mapped_refuses_the_mapping_of_another_compute() -> None:
    C = gemm(4, 4, 4, "float32", "float32")
    D = ops.matmul(te.placeholder((4, 4), name="P"), te.placeholder((4, 4), name="Q"),
                   name="D")
    physical = generate(C, FMA_BCAST, match(C, FMA_BCAST).mappings[0])
    with pytest.raises(LoweringError, match="mapping is of compute C, not D"):
        lower_mapped(D, physical, LoweringOptions())


# tensorization plans ---------------------------------------------------------------------------
SPEC = gpu_spec_example().model_copy(update={"intrinsics": (wmma(16, 16, 16),)})


def half_program() -> tc.Graph:
    A = te.placeholder((20, 30), "float16", name="A")
    B = te.placeholder((30, 40), "float16", name="B")
    C = ops.matmul(A, B, out_dtype="float32", name="C")
    return tc.Graph.from_outputs([ops.relu(C, name="R")])


def test_plans_choose_verified_mappings() -> None:
    graph = half_program()
    auto = plan_tensorization(graph, SPEC, True)
    assert list(auto) == ["C"]  # relu is no product: left to the usual lowering
    assert auto["C"].ranked.verified and not auto["C"].forced
    named = plan_tensorization(graph, SPEC, {"C": "wmma_16x16x16"})
    assert named["C"].ranked.mapping == auto["C"].ranked.mapping
    forced = plan_tensorization(graph, SPEC, {"C": {"intrinsic": "wmma_16x16x16", "loops": {
        "i1": ["i"], "i2": ["j"], "r1": ["k"]}}})
    assert forced["C"].forced and forced["C"].ranked.mapping.names()["r1"] == ["k"]
    assert plan_tensorization(graph, SPEC, None) == {}


def test_a_forced_mapping_that_fails_verification_says_why() -> None:
    with pytest.raises(MappingError, match="fails verification") as info:
        plan_tensorization(half_program(), SPEC, {"C": {
            "intrinsic": "wmma_16x16x16", "loops": {"i1": ["i", "j"], "r1": ["k"]}}})
    reason = info.value.reasons[0]
    assert reason.kind is ReasonKind.ACCESS_MATRIX and reason.software_loop == "j"


def test_bad_tensorize_requests() -> None:
    graph = half_program()
    with pytest.raises(TargetError, match="declares no intrinsic 'vfoo'"):
        plan_tensorization(graph, SPEC, {"C": "vfoo"})
    with pytest.raises(InputError, match="'D', which is no compute of the graph"):
        plan_tensorization(graph, SPEC, {"D": "wmma_16x16x16"})
    with pytest.raises(InputError, match="give an intrinsic name"):
        plan_tensorization(graph, SPEC, {"C": 3})
    with pytest.raises(InputError, match=r"tensorize=7: give None or 'auto' \(the model "
                       r"decides\), False or 'off' \(nothing\), True"):
        plan_tensorization(graph, SPEC, 7)
    with pytest.raises(MappingError, match="compute R has no mapping onto wmma") as info:
        plan_tensorization(graph, SPEC, {"R": "wmma_16x16x16"})
    assert info.value.reasons[0].kind is ReasonKind.NOT_PRODUCT_SUM
    with pytest.raises(MappingError, match="maps onto none of the intrinsics"):
        plan_tensorization(graph, SPEC, {"R": "auto"})
