"""The outer-product micro-kernel (Algorithm 2, Eq. 3.4) and the contraction template, natively."""

import numpy as np
import pytest
from template_forcing import ForcedTarget
from tilecraft_x86_avx512 import build
from tilecraft_x86_avx512.microkernels import (
    OUTER_PRODUCT_F32,
    register_blocking,
    register_blocking_candidates,
    render,
)
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import CodegenError, LoweringError
from tilecraft.lower.options import LoweringOptions
from tilecraft.reference import run


def test_eq_3_4_register_blocking():
    best = register_blocking(registers=32, ki=256)
    assert best.mi * best.ni + best.ni + best.mii <= 32
    # no feasible tile has a higher intensity
    for cand in register_blocking_candidates(32, 256):
        assert cand.intensity <= best.intensity
        assert cand.mi * cand.ni + cand.ni + cand.mii <= 32
    # the thesis's Cascade Lake choice (6, 4, 2) is feasible and within 5% of the optimum
    ki = 256
    ai = 6 * 4 * ki / (ki * (6 + 4) + 2 * 6 * 4)
    assert ai >= 0.95 * best.intensity
    # fewer registers, smaller tiles
    assert register_blocking(registers=16, ki=256).mi * register_blocking(16, 256).ni < 25


def test_render_errors():
    with pytest.raises(CodegenError, match="no micro-kernel 'nope'"):
        render("nope", {}, "f")
    with pytest.raises(CodegenError, match="NR"):
        render("outer_product_f32", {"NR": 20}, "f")
    with pytest.raises(CodegenError, match="MI"):
        render("outer_product_f32", {"MI": 99}, "f")


def test_micro_kernel_matches_its_declared_semantics():
    """The rendered kernel, called through a one-call Kernel IR, equals the declaration."""
    rng = np.random.default_rng(0)
    for mi, nr, ki in [(5, 80, 7), (1, 16, 1), (6, 64, 13)]:
        text = render("outer_product_f32", {"MI": mi, "NR": nr, "KI": ki}, "mk")
        text = text.replace("alwaysinline nounwind", "nounwind").replace(
            "define internal", "define")
        text += ("\ndeclare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, "
                 "<16 x float>)\n")
        jit = build.jit_compile(text)
        import ctypes

        fn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64] * 3))(
            jit.address("mk"))
        a = rng.standard_normal((ki, mi + 3)).astype(np.float32)  # k stride mi + 3
        b = rng.standard_normal((ki, nr)).astype(np.float32)
        c = rng.standard_normal((mi, nr + 16)).astype(np.float32)
        expected = c.copy()
        OUTER_PRODUCT_F32.reference(a[:, :mi], b, expected[:, :nr], MI=mi, NR=nr, KI=ki, MV=mi,
                                    NC=nr)
        fn(a.ctypes.data, mi + 3, 1, b.ctypes.data, nr, 1, c.ctypes.data, nr + 16, 1)
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["outer_product_f32", "outer_product_f32_rows",
                                  "outer_product_f32_set", "outer_product_f32_rows_set"])
def test_outer_product_variants_match_their_declared_semantics(name):
    """Each variant (A packed or read as rows; adding to C or writing it: the first reduction
    slice's ``_set`` kernels never read C), on whole and ragged tiles (MV < MI, NC < NR with a
    wholly unwritten vector), natively against its declaration; C around the tile untouched."""
    import ctypes

    from tilecraft_x86_avx512.microkernels import MICRO_KERNELS

    decl = MICRO_KERNELS[name]
    rows = "rows" in name
    rng = np.random.default_rng(1)
    for mi, nr, ki, mv, nc in [(6, 64, 13, 6, 64), (6, 64, 5, 4, 20), (1, 16, 1, 1, 1),
                               (5, 80, 9, 5, 33)]:
        params = {"MI": mi, "NR": nr, "KI": ki, "MV": mv, "NC": nc}
        text = render(name, params, "mk").replace("alwaysinline nounwind", "nounwind").replace(
            "define internal", "define")
        text += "\n" + "\n".join([
            "declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)",
            'declare <16 x float> @"llvm.masked.load.v16f32.p0"(ptr, <16 x i1>, <16 x float>)',
            'declare void @"llvm.masked.store.v16f32.p0"(<16 x float>, ptr, <16 x i1>)'])
        fn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64] * 3))(
            build.jit_compile(text, f"{name} test").address("mk"))
        a = rng.standard_normal((mi + 2, ki + 3) if rows else (ki, mi + 3)).astype(np.float32)
        b = rng.standard_normal((ki, nr)).astype(np.float32)
        c = rng.standard_normal((mi + 1, nr + 16)).astype(np.float32)
        expected = c.copy()
        a_view = a[:mv, :ki] if rows else a[:, :mv]
        decl.reference(a_view, b[:, :nc], expected[:mv, :nc], **params)
        a_strides = (ki + 3, 1) if rows else (mi + 3, 1)
        fn(a.ctypes.data, *a_strides, b.ctypes.data, nr, 1, c.ctypes.data, nr + 16, 1)
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m, n, k", [(37, 129, 61), (64, 64, 64), (2, 300, 40), (97, 17, 3),
                                     (1, 1, 200)])
def test_matmul_template_native(m, n, k):
    rng = np.random.default_rng(m * n + k)
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    config = {"MI": 5, "NR": 32, "KC": 16, "MC": 10}
    exe = tc.compile(ops.matmul(A, B, name="C"), target=ForcedTarget(config) if m * n > 1 else
                     "x86_avx512")
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(exe(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_default_template_on_batch_dense_and_conv():
    rng = np.random.default_rng(3)
    X = te.placeholder((3, 33, 40), name="X")
    Y = te.placeholder((3, 40, 50), name="Y")
    D = te.placeholder((45, 70), name="D")
    W = te.placeholder((31, 70), name="W")
    image = te.placeholder((1, 8, 13, 11), name="image")
    weight = te.placeholder((24, 8, 3, 3), name="weight")
    for program in (ops.batch_matmul(X, Y, name="Z"), ops.dense(D, W, name="E"),
                    ops.conv2d(image, weight, padding=1, stride=2, name="conv")):
        graph = tc.Graph.from_outputs([program])
        exe = tc.compile(graph, target="x86_avx512")
        assert any(k.attrs.get("micro_kernel") for k in exe.kernels), exe.report
        inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
        np.testing.assert_allclose(exe(**inputs), run(graph, inputs), rtol=1e-4, atol=1e-4)


def test_generated_code_is_an_fma_outer_product():
    A = te.placeholder((128, 128), name="A")
    B = te.placeholder((128, 128), name="B")
    exe = tc.compile(ops.matmul(A, B, name="C"), target="x86_avx512")
    source = exe.sources["C"].text
    assert "@llvm.fma.v16f32" in source
    asm = build.emit_assembly(source)
    fmas = [line for line in asm.splitlines() if "vfmadd231ps" in line and "zmm" in line]
    assert len(fmas) >= 20  # the unrolled MI x NI accumulator block
    assert "vbroadcastss" in asm or "{1to16}" in asm  # A values broadcast (RegA, MII)


def test_template_errors():
    target = X86Avx512Target()
    options = LoweringOptions.from_spec(target.spec)
    A = te.placeholder((40, 40), name="A")
    with pytest.raises(LoweringError, match="not a float32 sum of products"):
        target.lower_compute(ops.relu(A), options, {"MI": 4})
    B = te.placeholder((40, 40), name="B")
    with pytest.raises(LoweringError, match="unknown micro-kernel template parameters"):
        target.lower_compute(ops.matmul(A, B), options, {"MX": 4})
    with pytest.raises(Exception, match="NR"):
        target.lower_compute(ops.matmul(A, B), options, {"NR": 20})
