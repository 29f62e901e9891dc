"""The faster int8 paths, natively: int8 x int8 (and uint8 x uint8) with B shifted and A read
in place, the row-sum micro-kernel, whole tiles in registers, the default blocking; exact."""

import ctypes

import numpy as np
import pytest
from cpu_features import VNNI, needs
from tilecraft_x86_avx512 import build
from tilecraft_x86_avx512.gemm_template import grouped_default_config, grouped_micro_kernel
from tilecraft_x86_avx512.microkernels import (
    LLVM_DECLARATIONS,
    VNNI_ROW_SUMS_S8,
    VNNI_ROW_SUMS_U8,
    render,
)
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import CodegenError
from tilecraft.graph import Graph
from tilecraft.passes.contraction import as_dot_product_contraction
from tilecraft.reference import run

pytestmark = needs(VNNI)  # every test runs (or plans for) VNNI micro-kernels here


def _data(tensor, rng):
    if tensor.dtype.value == "uint8":
        return rng.integers(0, 256, tensor.shape).astype(np.uint8)
    return rng.integers(-128, 128, tensor.shape).astype(np.int8)


def _exact(program, rng, threads=2):
    graph = Graph.from_outputs([program])
    exe = tc.compile(graph, target=X86Avx512Target(threads=threads))
    inputs = {t.name: _data(t, rng) for t in graph.inputs}
    np.testing.assert_array_equal(exe(**inputs), run(graph, inputs))
    return exe


@pytest.mark.parametrize("decl", [VNNI_ROW_SUMS_S8, VNNI_ROW_SUMS_U8], ids=lambda d: d.name)
@pytest.mark.parametrize("mi, kg", [(6, 256), (1, 1), (5, 17), (3, 16), (7, 35), (2, 15)])
def test_row_sums_micro_kernel_matches_its_semantics(decl, mi, kg):
    """Strided rows (row stride > KG groups), whole 64-byte chunks and a masked tail."""
    text = render(decl.name, {"MI": mi, "KG": kg}, "mk")
    text = text.replace("alwaysinline nounwind", "nounwind").replace("define internal", "define")
    for name, ret, args in LLVM_DECLARATIONS[decl.name]:
        text += f"\ndeclare {ret} @{name}({', '.join(args)})\n"
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn = ctypes.CFUNCTYPE(None, ptr, i64, i64, i64, ptr, i64)(build.jit_compile(text)
                                                             .address("mk"))
    rng = np.random.default_rng(mi * kg)
    a = _data(te.placeholder((mi + 1, kg + 5, 4), decl.operands[0].dtype.value), rng)
    s = rng.integers(-1000, 1000, mi + 3).astype(np.int32)
    expected = s.copy()
    decl.reference(a[:mi, :kg], expected[:mi], MI=mi, KG=kg)
    fn(a.ctypes.data, (kg + 5) * 4, 4, 1, s.ctypes.data, 1)
    np.testing.assert_array_equal(s, expected)         # rows mi.. untouched


def test_row_sums_render_errors():
    with pytest.raises(CodegenError, match="vnni_row_sums_s8.*MI"):
        render("vnni_row_sums_s8", {"MI": 40}, "f")


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("m, n, k", [(61, 67, 64), (97, 16, 128), (40, 130, 36), (6, 64, 256)])
def test_same_signedness_shifts_b_and_reads_a_in_place(dtype, m, n, k):
    rng = np.random.default_rng(m + n + k)
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    exe = _exact(ops.matmul(A, B, out_dtype="int32", name="C"), rng)
    main = exe.kernels[-1]
    assert main.attrs["micro_kernel"] == ("vnni_s8u8" if dtype == "int8" else "vnni_u8s8")
    assert "B packed as" in main.attrs["schedule"] and main.param("A").shape == (m, k // 4, 4)
    # no row-sum kernel: B packed by its own kernel or inside C (NC, by the default rule)
    assert [kernel.name for kernel in exe.kernels] in (["C_bpacked_pack", "C"], ["C"])


@pytest.mark.parametrize("m, n, k", [(61, 67, 61), (33, 70, 30)])
def test_same_signedness_with_k_not_a_multiple_of_4_shifts_a(m, n, k):
    rng = np.random.default_rng(m * n + k)
    A = te.placeholder((m, k), "int8", name="A")
    B = te.placeholder((k, n), "int8", name="B")
    exe = _exact(ops.matmul(A, B, name="C"), rng)
    assert "A packed as uint8" in exe.kernels[-1].attrs["schedule"]


def test_int8_conv_and_single_thread():
    rng = np.random.default_rng(7)
    image = te.placeholder((1, 16, 9, 11), "int8", name="image")      # int8 activations
    weight = te.placeholder((24, 16, 3, 3), "int8", name="weight")
    exe = _exact(ops.conv2d(image, weight, padding=1, out_dtype="int32", name="conv"), rng)
    assert "B packed as uint8" in exe.kernels[-1].attrs["schedule"]
    A = te.placeholder((50, 96), "int8", name="A")
    B = te.placeholder((96, 45), "int8", name="B")
    _exact(ops.matmul(A, B, name="C"), rng, threads=1)


def test_choice_and_default_blocking():
    A = te.placeholder((64, 64), "uint8", name="A")
    B = te.placeholder((64, 64), "uint8", name="B")
    gc = as_dot_product_contraction(ops.matmul(A, B, out_dtype="int32"))
    assert grouped_micro_kernel(gc, a_in_place=True)[0] == "vnni_u8s8"
    assert grouped_micro_kernel(gc)[0] == "vnni_s8u8"
    # one k slice while the panel fits half of L2 (a 7x7 layer's K = 4608), else slices
    for k, one_slice in ((4608, True), (16384, False)):
        W = te.placeholder((512, k), "int8", name="W")
        X = te.placeholder((k, 49), "uint8", name="X")
        config = grouped_default_config(as_dot_product_contraction(
            ops.matmul(W, X, out_dtype="int32")), l2_bytes=1 << 20, threads=2)
        assert (config["KC"] == k) == one_slice
        assert config["KC"] * config["NR"] <= 1 << 19
        assert (512 // config["MC"] + (512 % config["MC"] > 0)) % 2 == 0   # whole rounds
