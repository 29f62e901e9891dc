"""Tensorized x86 code: int8 GEMM / conv2d on AVX512-VNNI ``vpdpbusd`` and bfloat16 GEMM on
AVX512-BF16 ``vdpbf16ps``, natively; exact for integers, within tolerance for bfloat16."""

import ctypes

import ml_dtypes
import numpy as np
import pytest
from cpu_features import BF16, MICRO_KERNEL_FLAGS, VNNI, needs, skip_without
from template_forcing import ForcedTarget
from tilecraft_x86_avx512 import build
from tilecraft_x86_avx512.blocking.register_tiles import Blocking
from tilecraft_x86_avx512.gemm_template import (
    grouped_default_config,
    grouped_micro_kernel,
    lower_grouped,
)
from tilecraft_x86_avx512.microkernels import (
    DOT_BF16,
    LLVM_DECLARATIONS,
    MICRO_KERNELS,
    VNNI_S8U8,
    VNNI_U8S8,
    render,
)
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import CodegenError, LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import as_dot_product_contraction
from tilecraft.reference import run

SIGNS = [("uint8", "int8"), ("int8", "int8"), ("int8", "uint8"), ("uint8", "uint8")]


def _data(tensor, rng):
    if tensor.dtype.value == "uint8":
        return rng.integers(0, 256, tensor.shape).astype(np.uint8)
    if tensor.dtype.value == "int8":
        return rng.integers(-128, 128, tensor.shape).astype(np.int8)
    return rng.standard_normal(tensor.shape).astype(tensor.dtype.numpy)


def _native_vs_reference(program, target, rng, exact=True):
    graph = Graph.from_outputs([program])
    exe = tc.compile(graph, target=target)
    assert exe.kernels[-1].attrs.get("micro_kernel") in MICRO_KERNELS, exe.report
    inputs = {t.name: _data(t, rng) for t in graph.inputs}
    got, expected = exe(**inputs), run(graph, inputs)
    if exact:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                                   rtol=2e-2, atol=2e-2)
    return exe


# the micro-kernels alone ---------------------------------------------------------------------
@pytest.mark.parametrize("decl", [VNNI_U8S8, VNNI_S8U8, DOT_BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("mi, nr, kg", [(5, 80, 7), (1, 16, 1), (6, 64, 13), (8, 48, 4)])
def test_micro_kernel_matches_its_declared_semantics(decl, mi, nr, kg):
    """The rendered kernel, called on strided operands, equals the declaration's semantics."""
    skip_without(MICRO_KERNEL_FLAGS[decl.name])
    text = render(decl.name, {"MI": mi, "NR": nr, "KG": kg}, "mk")
    text = text.replace("alwaysinline nounwind", "nounwind").replace("define internal", "define")
    for name, ret, args in LLVM_DECLARATIONS[decl.name]:
        text += f"\ndeclare {ret} @{name}({', '.join(args)})\n"
    jit = build.jit_compile(text)
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn = ctypes.CFUNCTYPE(None, ptr, i64, i64, i64, ptr, i64, i64, i64, ptr, i64, i64)(
        jit.address("mk"))
    rng = np.random.default_rng(mi * nr + kg)
    group = decl.operands[0].shape[2]
    a_type, b_type, c_type = (op.dtype for op in decl.operands)

    def data(shape, dtype):
        return _data(te.placeholder(shape, dtype), rng)

    a = data((mi + 2, kg + 3, group), a_type)        # row stride (kg + 3) * group, not packed
    b = data((kg, nr, group), b_type)
    c = data((mi, nr + 16), c_type) if c_type.value == "float32" else \
        rng.integers(-1000, 1000, (mi, nr + 16)).astype(np.int32)
    expected = c.copy()
    decl.reference(a[:mi, :kg], b, expected[:, :nr], MI=mi, NR=nr, KG=kg)
    fn(a.ctypes.data, (kg + 3) * group, group, 1, b.ctypes.data, nr * group, group, 1,
       c.ctypes.data, nr + 16, 1)
    if c_type.value == "int32":
        np.testing.assert_array_equal(c, expected)
    else:
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-4)


def test_render_errors_name_the_kernel_and_parameter():
    with pytest.raises(CodegenError, match="vnni_u8s8.*NR"):
        render("vnni_u8s8", {"NR": 20}, "f")
    with pytest.raises(CodegenError, match="dot_bf16.*MI"):
        render("dot_bf16", {"MI": 40}, "f")
    with pytest.raises(CodegenError, match="vnni_s8u8.*no parameter 'KI'"):
        render("vnni_s8u8", {"KI": 4}, "f")


# whole programs, natively --------------------------------------------------------------------
@needs(VNNI)
@pytest.mark.parametrize("a_dtype, b_dtype", SIGNS)
@pytest.mark.parametrize("m, n, k", [(37, 129, 61), (1, 17, 1), (97, 16, 3), (13, 48, 256)])
def test_int8_matmul_exact(a_dtype, b_dtype, m, n, k):
    rng = np.random.default_rng(m + n + k)
    A = te.placeholder((m, k), a_dtype, name="A")
    B = te.placeholder((k, n), b_dtype, name="B")
    config = {"MI": 5, "NR": 32, "KC": 64, "MC": 10}
    exe = _native_vs_reference(ops.matmul(A, B, out_dtype="int32", name="C"), ForcedTarget(config),
                               rng)
    # same signedness: B is shifted where A is read in place (4 | k), else A
    shift_b = a_dtype == b_dtype and k % 4 == 0
    expected_kernel = VNNI_U8S8.name if (b_dtype == "int8") != shift_b else VNNI_S8U8.name
    assert exe.kernels[-1].attrs["micro_kernel"] == expected_kernel


@needs(VNNI)
def test_int8_dense_batch_and_conv_default_template():
    rng = np.random.default_rng(4)
    D = te.placeholder((45, 70), "uint8", name="D")
    W = te.placeholder((31, 70), "int8", name="W")
    X = te.placeholder((3, 33, 40), "int8", name="X")
    Y = te.placeholder((3, 40, 50), "int8", name="Y")
    image = te.placeholder((1, 8, 13, 11), "uint8", name="image")
    weight = te.placeholder((24, 8, 3, 3), "int8", name="weight")
    image2 = te.placeholder((1, 32, 14, 14), "int8", name="image2")
    weight2 = te.placeholder((40, 32, 1, 1), "int8", name="weight2")
    image3 = te.placeholder((1, 4, 20, 20), "uint8", name="image3")   # K = 36: read in place
    weight3 = te.placeholder((30, 4, 3, 3), "int8", name="weight3")
    for program in (ops.dense(D, W, out_dtype="int32", name="E"),
                    ops.conv2d(image3, weight3, padding=1, out_dtype="int32", name="conv3"),
                    ops.batch_matmul(X, Y, name="Z"),
                    ops.conv2d(image, weight, padding=1, stride=2, out_dtype="int32",
                               name="conv"),
                    ops.conv2d(image2, weight2, stride=2, name="pointwise")):
        _native_vs_reference(program, X86Avx512Target(threads=2), rng)


@needs(BF16)
@pytest.mark.parametrize("out_dtype", ["float32", None])
def test_bf16_matmul_within_tolerance(out_dtype):
    rng = np.random.default_rng(5)
    A = te.placeholder((67, 130), "bfloat16", name="A")
    B = te.placeholder((130, 50), "bfloat16", name="B")
    exe = _native_vs_reference(ops.matmul(A, B, out_dtype=out_dtype, name="C"),
                               X86Avx512Target(threads=2), rng, exact=False)
    assert exe.kernels[-1].attrs["micro_kernel"] == DOT_BF16.name
    assert ("C_acc" in exe.kernels[-1].outputs) == (out_dtype is None)


@needs(VNNI, BF16)
def test_asm_uses_vpdpbusd_and_vdpbf16ps_on_zmm():
    for dtype, out, instruction in (("int8", "int32", "vpdpbusd"),
                                    ("bfloat16", "float32", "vdpbf16ps")):
        A = te.placeholder((64, 64), dtype, name="A")
        B = te.placeholder((64, 64), dtype, name="B")
        exe = tc.compile(ops.matmul(A, B, out_dtype=out, name="C"), target="x86_avx512")
        asm = build.emit_assembly(exe.sources["C"].text)
        hits = [line for line in asm.splitlines() if instruction in line and "zmm" in line]
        assert len(hits) >= 8, instruction  # the unrolled MI x NI accumulator block


@needs(VNNI, BF16)
def test_interpreter_with_declared_semantics_agrees_with_native():
    """The lowered kernels, interpreted with the declarations' semantics, give the native
    result bit for bit (int8 with compensation), and within rounding for bfloat16."""
    rng = np.random.default_rng(6)
    target = X86Avx512Target(threads=2)
    options = LoweringOptions.from_spec(target.spec)
    semantics = {name: decl.reference for name, decl in MICRO_KERNELS.items()}
    for dtype, out in (("int8", "int32"), ("bfloat16", None)):
        A = te.placeholder((23, 37), dtype, name="A")
        B = te.placeholder((37, 40), dtype, name="B")
        program = ops.matmul(A, B, out_dtype=out, name="C")
        gc = as_dot_product_contraction(program)
        kernels = lower_grouped(gc, Blocking(mi=4, nr=32, kc=16, mc=8), options)
        a, b = _data(A, rng), _data(B, rng)
        interpreted = run_kernels(kernels, {"A": a, "B": b}, semantics=semantics)["C"]
        exe = tc.compile(program, target=ForcedTarget({"MI": 4, "NR": 32, "KC": 16, "MC": 8}))
        native = exe(a, b)
        if dtype == "int8":
            np.testing.assert_array_equal(native, interpreted.reshape(native.shape))
        else:
            np.testing.assert_allclose(native.astype(np.float32),
                                       interpreted.reshape(native.shape).astype(np.float32),
                                       rtol=1e-2, atol=1e-2)
            assert native.dtype == ml_dtypes.bfloat16


# the template's choices ----------------------------------------------------------------------
def test_micro_kernel_choice_and_default_blocking():
    choices = {}
    for a_dtype, b_dtype in SIGNS:
        A = te.placeholder((64, 64), a_dtype, name="A")
        B = te.placeholder((64, 64), b_dtype, name="B")
        name, packed = grouped_micro_kernel(as_dot_product_contraction(
            ops.matmul(A, B, out_dtype="int32")))
        choices[(a_dtype, b_dtype)] = (name, packed.value)
    assert choices == {("uint8", "int8"): ("vnni_u8s8", "uint8"),
                       ("int8", "int8"): ("vnni_u8s8", "uint8"),
                       ("int8", "uint8"): ("vnni_s8u8", "int8"),
                       ("uint8", "uint8"): ("vnni_s8u8", "int8")}
    A = te.placeholder((1000, 300), "uint8", name="A")
    B = te.placeholder((300, 512), "int8", name="B")
    gc = as_dot_product_contraction(ops.matmul(A, B, out_dtype="int32"))
    for threads in (1, 2, 3):
        config = grouped_default_config(gc, l2_bytes=1 << 20, threads=threads)
        assert config["KC"] == 300 and 512 % config["NR"] == 0   # one slice, whole panels
        blocks = -(-1000 // config["MC"])
        assert config["MC"] % config["MI"] == 0 and blocks % threads == 0


@needs(VNNI)
def test_template_errors():
    target = X86Avx512Target()
    options = LoweringOptions.from_spec(target.spec)
    U = te.placeholder((40, 40), "uint8", name="U")
    with pytest.raises(LoweringError, match="uint8/int8 operands into int32"):
        target.lower_compute(ops.relu(U), options, {"MI": 4})
    S = te.placeholder((40, 40), "int8", name="S")
    with pytest.raises(LoweringError, match="unknown micro-kernel template parameters"):
        target.lower_compute(ops.matmul(U, S, out_dtype="int32"), options, {"KG": 4})
    with pytest.raises(Exception, match="NR"):
        target.lower_compute(ops.matmul(U, S, out_dtype="int32"), options, {"NR": 20})
