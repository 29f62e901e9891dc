"""Computes tensorized onto WMMA (tilecraft_nvidia_tc.tensor_cores): the Kernel IR kernel on the
interpreter, its CUDA source emulated on the CPU and built with NVRTC for sm_80 and sm_90,
against the numpy reference on awkward shapes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tilecraft_nvidia_tc.availability import emulate_status
from tilecraft_nvidia_tc.target import NvidiaTcTarget
from tilecraft_nvidia_tc.tensor_cores import WmmaTiles, lower_tensor_core_mapping

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.intrin import generate, match
from tilecraft.kernel_ir.concurrency import Pipeline
from tilecraft.kernel_ir.interpreter import run_kernel
from tilecraft.kernel_ir.nodes import IntrinsicCall, Region
from tilecraft.kernel_ir.visitor import KernelTransformer, walk_stmts
from tilecraft.lower import LoweringOptions
from tilecraft.reference import evaluate

TARGET = NvidiaTcTarget()
SPEC = TARGET.spec
needs_emulation = pytest.mark.skipif(not emulate_status()[0], reason="no host C++ compiler")


def _kernel(compute, intrinsic: str, mapping: int = 0, tiles: WmmaTiles | None = None):
    decl = SPEC.intrinsic(intrinsic)
    found = match(compute, decl)
    assert found.mappings, f"no mapping of {compute.name} onto {intrinsic}"
    [kernel] = lower_tensor_core_mapping(
        compute, generate(compute, decl, found.mappings[mapping]),
        LoweringOptions.from_spec(SPEC), tiles)
    return kernel


def _arrays(inputs, output, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {t.name: rng.integers(-4, 5, t.shape).astype(t.dtype.numpy) for t in inputs}
    arrays[output.name] = np.zeros(output.shape, output.dtype.numpy)
    return arrays


def _reference(output, inputs, arrays) -> np.ndarray:
    return evaluate(output, {t: arrays[t.name] for t in inputs}).astype(np.float64)


GEMMS = [  # M, N, K, intrinsic, input dtype, output dtype
    (2, 3, 5, "wmma_m16n16k16_f16_f32", "float16", "float32"),
    (67, 45, 33, "wmma_m16n16k16_f16_f32", "float16", "float32"),
    (67, 45, 33, "wmma_m32n8k16_f16_f16", "float16", "float16"),
    (31, 37, 41, "wmma_m8n32k16_bf16_f32", "bfloat16", "float32"),
    (17, 19, 40, "wmma_m16n16k16_i8_i32", "int8", "int32"),
    (13, 29, 7, "wmma_m32n8k16_i8_i32", "int8", "int32"),
]


def _gemm(m: int, n: int, k: int, dtype: str, out_dtype: str):
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    return ops.matmul(A, B, out_dtype=out_dtype, name="C"), [A, B]


@pytest.mark.parametrize(("m", "n", "k", "intrinsic", "dtype", "out_dtype"), GEMMS)
def test_gemm_interpreted_equals_reference(m, n, k, intrinsic, dtype, out_dtype):
    C, inputs = _gemm(m, n, k, dtype, out_dtype)
    kernel = _kernel(C, intrinsic)
    arrays = _arrays(inputs, C)
    run_kernel(kernel, arrays, SPEC.reference_semantics())
    # small integers: every product and sum is exact in each dtype, int8 -> int32 always
    np.testing.assert_array_equal(arrays["C"].astype(np.float64),
                                  _reference(C, inputs, arrays))


@needs_emulation
@pytest.mark.parametrize(("m", "n", "k", "intrinsic", "dtype", "out_dtype"),
                         [GEMMS[0], GEMMS[2], GEMMS[3], GEMMS[4]])
def test_gemm_emulated_source_equals_reference(m, n, k, intrinsic, dtype, out_dtype):
    C, inputs = _gemm(m, n, k, dtype, out_dtype)
    kernel = _kernel(C, intrinsic)
    source = TARGET.codegen(kernel)
    assert "nvcuda::wmma::mma_sync" in source.text and "load_matrix_sync" in source.text
    arrays = _arrays(inputs, C, seed=1)
    TARGET.emulator(kernel, source)(arrays)
    np.testing.assert_array_equal(arrays["C"].astype(np.float64),
                                  _reference(C, inputs, arrays))


@needs_emulation
@pytest.mark.parametrize(("m", "n", "k", "intrinsic", "dtype", "out_dtype", "async_copies"), [
    (35, 48, 40, "wmma_m16n16k16_f16_f32", "float16", "float32", 2),  # both operands
    (35, 45, 40, "wmma_m32n8k16_f16_f32", "float16", "float32", 1),   # B's rows ragged (45)
    (17, 32, 48, "wmma_m16n16k16_i8_i32", "int8", "int32", 2),
    (5, 19, 37, "wmma_m8n32k16_bf16_f32", "bfloat16", "float32", 0),  # K = 37: no chunks
])
def test_double_buffered_cp_async_staging(m, n, k, intrinsic, dtype, out_dtype, async_copies):
    """stages=2 (the default): slice kt + 1 copied with cp.async while kt is multiplied, the
    operands whose panel rows are contiguous in 16-byte chunks, the others element by element;
    the emulated source (two interleavings of the threads, cp.async landing at its wait) and
    the single-buffered kernel both equal the reference."""
    C, inputs = _gemm(m, n, k, dtype, out_dtype)
    kernel = _kernel(C, intrinsic)
    assert kernel.attrs["tiles"]["stages"] == 2
    assert any(isinstance(s, Pipeline) for s in walk_stmts(kernel.body))
    source = TARGET.codegen(kernel)
    assert source.text.count("tc_cp_async_16(") == async_copies
    assert ("tc_cp_async_wait<1>()" in source.text) and ("tc_cp_async_commit()" in source.text)
    arrays = _arrays(inputs, C, seed=5)
    TARGET.emulator(kernel, source)(arrays)
    expected = _reference(C, inputs, arrays)
    np.testing.assert_array_equal(arrays["C"].astype(np.float64), expected)
    single = _kernel(C, intrinsic, tiles=WmmaTiles(stages=1))
    assert not any(isinstance(s, Pipeline) for s in walk_stmts(single.body))
    assert "tc_cp_async" not in TARGET.codegen(single).text
    if kernel.launch.block[0] <= 32:  # the interpreter takes seconds per 128-thread block
        arrays["C"][...] = 0
        run_kernel(single, arrays, SPEC.reference_semantics())
        np.testing.assert_array_equal(arrays["C"].astype(np.float64), expected)


def test_gemm_fp16_real_values_close_to_reference():
    A = te.placeholder((37, 29), "float16", name="A")
    B = te.placeholder((29, 23), "float16", name="B")
    C = ops.matmul(A, B, out_dtype="float32", name="C")
    rng = np.random.default_rng(3)
    arrays = {"A": rng.standard_normal((37, 29)).astype(np.float16),
              "B": rng.standard_normal((29, 23)).astype(np.float16),
              "C": np.zeros((37, 23), np.float32)}
    run_kernel(_kernel(C, "wmma_m16n16k16_f16_f32"), arrays, SPEC.reference_semantics())
    np.testing.assert_allclose(arrays["C"], _reference(C, [A, B], arrays), rtol=1e-5,
                               atol=1e-4)


def test_kernel_is_a_warp_outer_product_of_fragments():
    C, _ = _gemm(67, 45, 33, "float16", "float32")
    kernel = _kernel(C, "wmma_m16n16k16_f16_f32")
    calls = [s for s in walk_stmts(kernel.body) if isinstance(s, IntrinsicCall)]
    assert len(calls) == 4  # a 2 x 2 outer product per warp
    a_buffers = {call.operands[0].buffer.name for call in calls}
    b_buffers = {call.operands[1].buffer.name for call in calls}
    assert len(a_buffers) == len(b_buffers) == 2  # each loaded fragment feeds two mma_sync
    assert kernel.attrs["tiles"]["FM"] == kernel.attrs["tiles"]["FN"] == 2
    assert kernel.launch.block == (128,) and kernel.launch.grid == (2,)


def test_builds_for_sm80_and_sm90_with_resource_report():
    C, _ = _gemm(67, 45, 33, "float16", "float32")
    source = TARGET.codegen(_kernel(C, "wmma_m16n16k16_f16_f32"))
    available = TARGET.available()
    if not available.build:
        pytest.skip(available.reasons.get("build", "no CUDA compiler"))
    artifact = TARGET.build(source)
    summary = artifact.meta["summary"]
    assert "sm_80" in summary and "sm_90" in summary
    assert "spill 0 B stored" in summary


@needs_emulation
def test_batch_gemm_and_convolutions_emulated():
    A = te.placeholder((3, 13, 20), "float16", name="A")
    B = te.placeholder((3, 20, 11), "float16", name="B")
    X = te.placeholder((2, 5, 9, 7), "float16", name="X")
    W = te.placeholder((6, 5, 3, 3), "float16", name="W")
    Xh = te.placeholder((1, 7, 6, 8), "float16", name="Xh")
    Wh = te.placeholder((3, 3, 8, 5), "float16", name="Wh")
    cases = [(ops.batch_matmul(A, B, out_dtype="float32", name="C"), [A, B]),
             (ops.conv2d(X, W, stride=2, out_dtype="float32", name="Y"), [X, W]),
             (ops.conv2d(Xh, Wh, layout="NHWC", out_dtype="float32", name="Yh"), [Xh, Wh])]
    for output, inputs in cases:
        kernel = _kernel(output, "wmma_m16n16k16_f16_f32")
        arrays = _arrays(inputs, output, seed=2)
        TARGET.emulator(kernel, TARGET.codegen(kernel))(arrays)
        np.testing.assert_array_equal(arrays[output.name].astype(np.float64),
                                      _reference(output, inputs, arrays), err_msg=output.name)


def _best_kernel(compute, intrinsic: str):
    """The kernel of AMOS's best-ranked mapping of ``compute`` onto ``intrinsic``."""
    from tilecraft.intrin.perfmodel import rank_mappings

    decl = SPEC.intrinsic(intrinsic)
    [best, *_] = rank_mappings(compute, decl, SPEC, mappings=match(compute, decl).mappings)
    [kernel] = lower_tensor_core_mapping(compute, generate(compute, decl, best.mapping),
                                         LoweringOptions.from_spec(SPEC))
    return kernel


def _convolutions():
    X = te.placeholder((2, 6, 9, 7), "float16", name="X")
    W = te.placeholder((10, 3, 3, 3), "float16", name="W")
    Xn = te.placeholder((1, 7, 6, 4), "int8", name="Xn")
    Wn = te.placeholder((3, 2, 4, 5), "int8", name="Wn")
    Xd = te.placeholder((1, 5, 6, 7), "bfloat16", name="Xd")
    Wd = te.placeholder((5, 1, 3, 3), "bfloat16", name="Wd")
    Xg = te.placeholder((2, 5, 7, 6), "float16", name="Xg")
    Wg = te.placeholder((3, 3, 3, 4), "float16", name="Wg")
    return {  # name: (output, inputs, intrinsic)
        "grouped NCHW, stride 2": (ops.conv2d(X, W, stride=2, groups=2, out_dtype="float32",
                                              name="Y"), [X, W], "mma_m16n8k16_f16_f32"),
        "int8 NHWC, 3x2 window": (ops.conv2d(Xn, Wn, layout="NHWC", out_dtype="int32",
                                             name="Yn"), [Xn, Wn], "mma_m16n8k16_i8_i32"),
        "depthwise NCHW": (ops.conv2d(Xd, Wd, groups=5, out_dtype="float32",
                                      name="Yd"), [Xd, Wd], "wmma_m16n16k16_bf16_f32"),
        "grouped NHWC, stride 2": (ops.conv2d(Xg, Wg, layout="NHWC", stride=2, groups=2,
                                              out_dtype="float32", name="Yg"), [Xg, Wg],
                                   "wmma_m32n8k16_f16_f32"),
    }


@needs_emulation
@pytest.mark.parametrize("case", [
    "grouped NCHW, stride 2", "int8 NHWC, 3x2 window",
    pytest.param("depthwise NCHW", marks=pytest.mark.slow),
    pytest.param("grouped NHWC, stride 2", marks=pytest.mark.slow)])
def test_convolutions_on_tensor_cores_emulated(case):
    """Grouped, strided, int8 and depthwise convolutions through AMOS's best mapping, WMMA or
    mma.sync: the emulated source equals the reference (int8 exact). A grouped or depthwise
    convolution reads its output channels through the group, so no mapping puts them on the
    intrinsic's columns: the kernel says which part of the tile it uses, and why."""
    output, inputs, intrinsic = _convolutions()[case]
    kernel = _best_kernel(output, intrinsic)
    arrays = _arrays(inputs, output, seed=8)
    TARGET.emulator(kernel, TARGET.codegen(kernel))(arrays)
    np.testing.assert_array_equal(arrays[output.name].astype(np.float64),
                                  _reference(output, inputs, arrays))
    grouped = "grouped" in case or "depthwise" in case
    assert any("columns" in note and "group" in note for note in kernel.attrs["notes"]) \
        == grouped
    assert 0 < kernel.attrs["tile_utilization"] <= (1 / 8 if grouped else 1)


def test_depthwise_convolution_stays_off_the_tensor_cores_with_the_reason():
    from tilecraft.intrin.decision import decide_mappings

    Xd = te.placeholder((1, 32, 28, 28), "float16", name="Xd")
    Wd = te.placeholder((32, 1, 3, 3), "float16", name="Wd")
    graph = tc_graph(ops.conv2d(Xd, Wd, groups=32, out_dtype="float32", name="Yd"))
    plan = decide_mappings(graph, TARGET, LoweringOptions.from_spec(SPEC), None)
    decision = plan.decisions["Yd"]
    assert not decision.tensorized and "i2 <- ()" in decision.reason
    assert "is slower than" in decision.reason and "template" in decision.reason


@needs_emulation
def test_batch_gemm_on_mma_sync_emulated():
    A = te.placeholder((3, 13, 20), "bfloat16", name="A")
    B = te.placeholder((3, 20, 11), "bfloat16", name="B")
    C = ops.batch_matmul(A, B, out_dtype="float32", name="C")
    kernel = _best_kernel(C, "mma_m16n8k16_bf16_f32")
    assert kernel.launch.grid == (3,) and kernel.attrs["tile_utilization"] < 1
    arrays = _arrays([A, B], C, seed=9)
    TARGET.emulator(kernel, TARGET.codegen(kernel))(arrays)
    np.testing.assert_array_equal(arrays["C"].astype(np.float64), _reference(C, [A, B], arrays))


def tc_graph(output):
    from tilecraft import Graph

    return Graph.from_outputs([output])


def test_codegen_refuses_an_intrinsic_it_cannot_express():
    C, _ = _gemm(16, 16, 16, "float16", "float32")
    kernel = _kernel(C, "wmma_m16n16k16_f16_f32")

    class Rename(KernelTransformer):
        def visit_IntrinsicCall(self, stmt: IntrinsicCall) -> IntrinsicCall:
            return IntrinsicCall("mma_m16n8k16_f16_f32", stmt.operands, stmt.attrs)

    broken = replace(kernel, body=Rename().visit(kernel.body))
    # mma.sync fragments now, of 16 x 8 tiles the 16 x 16 copies do not fit: refused by name
    with pytest.raises(CodegenError, match="B_s -> b_frag0 .* whole 16x8 fragment"):
        TARGET.codegen(broken)


MMA_GEMMS = [  # M, N, K, intrinsic, input dtype, output dtype
    (2, 3, 5, "mma_m16n8k16_f16_f32", "float16", "float32"),
    (35, 45, 40, "mma_m16n8k16_f16_f32", "float16", "float32"),
    (19, 37, 41, "mma_m16n8k16_bf16_f32", "bfloat16", "float32"),
    (17, 32, 48, "mma_m16n8k16_i8_i32", "int8", "int32"),
    (13, 29, 7, "mma_m16n8k16_f16_f16", "float16", "float16"),  # f16x2 accumulators
]


@pytest.mark.parametrize(("m", "n", "k", "intrinsic", "dtype", "out_dtype"), MMA_GEMMS)
def test_mma_sync_inline_ptx_equals_reference(m, n, k, intrinsic, dtype, out_dtype):
    """The second lowering of the same mappings: per-lane registers gathered by the PTX
    fragment layouts and ``asm volatile("mma.sync.aligned.m16n8k16...")`` under __CUDA_ARCH__;
    the same source emulated (the header's per-lane mma.sync collective) and the Kernel IR
    interpreted equal the reference exactly (small integers: exact in every dtype)."""
    C, inputs = _gemm(m, n, k, dtype, out_dtype)
    kernel = _kernel(C, intrinsic)
    assert kernel.attrs["strategy"] == "nvidia_mma_sync"
    assert (kernel.attrs["tiles"]["FM"], kernel.attrs["tiles"]["FN"]) == (2, 4)
    arrays = _arrays(inputs, C, seed=6)
    expected = _reference(C, inputs, arrays)
    if kernel.launch.block[0] <= 32:  # the interpreter takes seconds per 128-thread block
        run_kernel(kernel, arrays, SPEC.reference_semantics())
        np.testing.assert_array_equal(arrays["C"].astype(np.float64), expected)
    source = TARGET.codegen(kernel)
    ptx_types = {"float16": "f16", "bfloat16": "bf16", "int8": "s8"}[dtype]
    accumulator = {"float32": "f32", "int32": "s32", "float16": "f16"}[out_dtype]
    assert (f'asm volatile("mma.sync.aligned.m16n8k16.row.col.{accumulator}.{ptx_types}.'
            f'{ptx_types}.{accumulator}') in source.text
    assert "#if defined(__CUDA_ARCH__)" in source.text and "nvcuda::wmma" not in source.text
    # operands loaded with ldmatrix (x4 for a 16-bit A, x2.trans for its B, x2 for int8 A)
    assert 'asm volatile("ldmatrix.sync.aligned.m8n8.x4' in source.text
    kind = "b8" if dtype == "int8" else "b16"
    assert f"tc_mma_load_a_{kind}(a_frag0, &A_s[" in source.text
    if not emulate_status()[0]:
        pytest.skip("no host C++ compiler")
    arrays["C"][...] = 0
    TARGET.emulator(kernel, source)(arrays)
    np.testing.assert_array_equal(arrays["C"].astype(np.float64), expected)


def test_mma_sync_fp16_real_values_close_to_reference():
    A = te.placeholder((37, 29), "float16", name="A")
    B = te.placeholder((29, 23), "float16", name="B")
    C = ops.matmul(A, B, out_dtype="float32", name="C")
    rng = np.random.default_rng(7)
    arrays = {"A": rng.standard_normal((37, 29)).astype(np.float16),
              "B": rng.standard_normal((29, 23)).astype(np.float16),
              "C": np.zeros((37, 23), np.float32)}
    kernel = _kernel(C, "mma_m16n8k16_f16_f32")
    if not emulate_status()[0]:
        pytest.skip("no host C++ compiler")
    TARGET.emulator(kernel, TARGET.codegen(kernel))(arrays)
    np.testing.assert_allclose(arrays["C"], _reference(C, [A, B], arrays), rtol=1e-5,
                               atol=1e-4)


def test_mma_sync_builds_for_sm80_and_sm90():
    A = te.placeholder((64, 64), "bfloat16", name="A")
    B = te.placeholder((64, 64), "bfloat16", name="B")
    C = ops.matmul(A, B, out_dtype="float32", name="C")
    source = TARGET.codegen(_kernel(C, "mma_m16n8k16_bf16_f32"))
    available = TARGET.available()
    if not available.build:
        pytest.skip(available.reasons.get("build", "no CUDA compiler"))
    summary = TARGET.build(source).meta["summary"]
    assert "sm_80" in summary and "sm_90" in summary
    assert "spill 0 B stored" in summary


def test_mma_sync_variants_it_cannot_emit_are_refused_by_name():
    from tilecraft_nvidia_tc.codegen.mma_sync import check
    from tilecraft_nvidia_tc.codegen.wmma import Fragment

    bf16 = [Fragment(use, 16, 8, 16, DType.BFLOAT16, "mma_sync")
            for use in ("matrix_a", "matrix_b", "accumulator")]
    with pytest.raises(CodegenError, match="kernel K: .* bfloat16 inputs and a bfloat16 "
                                           "accumulator.*WMMA"):
        check(tuple(bf16), "kernel K")


def test_fragment_buffers_hold_the_intrinsic_dtypes():
    C, _ = _gemm(20, 20, 20, "int8", "int32")
    kernel = _kernel(C, "wmma_m16n16k16_i8_i32")
    call = next(s for s in walk_stmts(kernel.body) if isinstance(s, IntrinsicCall))
    dtypes = [region.buffer.dtype for region in call.operands]
    assert dtypes == [DType.INT8, DType.INT8, DType.INT32]
    assert all(isinstance(region, Region) and region.buffer.level == "fragment"
               for region in call.operands)


@needs_emulation
def test_compile_with_a_forced_wmma_mapping_end_to_end():
    import tilecraft as tc

    C, (A, B) = _gemm(67, 45, 33, "float16", "float32")
    executable = tc.compile(C, target="nvidia_tc", tensorize={"C": "wmma_m16n16k16_f16_f32"})
    arrays = _arrays([A, B], C, seed=4)
    result = executable(arrays["A"], arrays["B"])
    result = result[0] if isinstance(result, (list, tuple)) else result
    np.testing.assert_array_equal(np.asarray(result, np.float64),
                                  _reference(C, [A, B], arrays))
    assert "nvidia_wmma" in [kernel.attrs.get("strategy") for kernel in executable.kernels]


@pytest.mark.parametrize(("intrinsic", "tiles", "message"), [
    ("mma_m16n8k16_f16_f32", WmmaTiles(warps_m=8, warps_n=8, fm=1, fn=1, bk=16),
     r"kernel C_mma_m16n8k16_f16_f32: the block tile \(8x8 warps .* has 2048 threads, above "
     r"max_threads_per_block 1024"),
    ("wmma_m16n16k16_f16_f32", WmmaTiles(fm=8, fn=8, bk=256),
     r"kernel C_wmma_m16n16k16_f16_f32: .* needs 1114112 bytes of shared memory per block, "
     r"above the limit of 166912"),
    ("wmma_m16n16k16_f16_f32", WmmaTiles(warps_m=1, warps_n=1, fm=4, fn=8, bk=16),
     r"kernel C_wmma_m16n16k16_f16_f32: .* needs about 352 registers per thread \(304 for "
     r"fragments\), above the 255"),
])
def test_tiles_over_a_limit_of_the_spec_are_refused_by_name(intrinsic, tiles, message):
    from tilecraft.errors import LoweringError

    C, _ = _gemm(1024, 1024, 1024, "float16", "float32")
    with pytest.raises(LoweringError, match=message):
        _kernel(C, intrinsic, tiles=tiles)


def test_a_dtype_no_tensor_core_intrinsic_takes_is_refused_by_name():
    import tilecraft as tc
    from tilecraft.intrin.mapping import MappingError

    C, _ = _gemm(64, 64, 64, "float32", "float32")
    with pytest.raises(MappingError, match=r"compute C has no mapping onto wmma_m16n16k16_f16_f32"
                                           r"(.|\n)*A is float32 but operand Src1 .* takes "
                                           r"float16"):
        tc.compile(C, target="nvidia_tc", tensorize={"C": "wmma_m16n16k16_f16_f32"})
