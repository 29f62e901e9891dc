"""float32 contractions on AMX tiles through bfloat16 parts (blocking/amx_split.py).

The interpreted kernels (the micro-kernel by its declared semantics) run on any machine; the
native ones need AMX-TILE and AMX-BF16 and Linux's permission for the tile state.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from c_programs import run_c_program
from cpu_features import needs
from tilecraft_x86_avx512 import build
from tilecraft_x86_avx512.amx import SWITCH, amx_permitted
from tilecraft_x86_avx512.blocking import amx_split
from tilecraft_x86_avx512.blocking.amx_split import lower_amx_split
from tilecraft_x86_avx512.microkernels import (
    AMX_SPLIT_F32,
    AMX_SPLIT_F32_ACC,
    LLVM_DECLARATIONS,
    MICRO_KERNELS,
    render,
)
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import CodegenError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import as_contraction
from tilecraft.reference import run

AMX = ("amx_tile", "amx_bf16")
#: prime and ragged sizes, one row / column / k, and K past a tile multiply's 32
SHAPES = [(37, 53, 41), (33, 3, 1000), (97, 31, 65), (33, 100, 47), (64, 64, 64)]
#: K in several slices of k (at the L2 the tests pass: 64 KiB), a ragged last one
SLICED = [(37, 300, 41), (64, 257, 64)]
SMALL_L2 = 1 << 16


@pytest.fixture(autouse=True)
def tiles_declared(monkeypatch):
    """The tile path declared wherever the CPU has it, whether or not this host's measured
    tile rate makes it pay (the spec leaves it out where it does not): its correctness is
    tested on every AMX machine."""
    monkeypatch.setenv(SWITCH, "1")


@pytest.fixture
def any_size(monkeypatch):
    """The path for the small, awkward shapes the tests use (by default it takes K and N of
    512 and more, where it pays)."""
    monkeypatch.setattr(amx_split, "MIN_COLUMNS", amx_split.TILE)
    monkeypatch.setattr(amx_split, "MIN_K", 1)


def _native_amx():
    return pytest.mark.skipif(not amx_permitted(), reason="no AMX tile state in this process")


def _relative_error(got: np.ndarray, exact: np.ndarray) -> float:
    return float(np.abs(got - exact).max() / np.abs(exact).max())


def _matmul(m: int, k: int, n: int, rng: np.random.Generator):
    A = te.placeholder((m, k), name="A")
    weights = rng.standard_normal((k, n)).astype(np.float32)
    return A, weights, ops.matmul(A, te.constant(weights, name="W"), name="C")


@pytest.mark.parametrize("m, k, n, l2", [(*shape, 1 << 21) for shape in SHAPES]
                         + [(*shape, SMALL_L2) for shape in SLICED])
def test_interpreted_kernels_are_float32_accurate(m, k, n, l2):
    """The lowered kernels, the micro-kernels run by their declared semantics, give the
    product as accurately as float32 does (any machine: nothing runs natively)."""
    rng = np.random.default_rng(m * k + n)
    A, weights, C = _matmul(m, k, n, rng)
    kernels = lower_amx_split(as_contraction(C), LoweringOptions(vector_lanes=16), l2, 2)
    assert ("k-slices(1)" in kernels[-1].attrs["schedule"]) == (l2 != SMALL_L2)
    a = rng.standard_normal((m, k)).astype(np.float32)
    semantics = {name: decl.reference for name, decl in MICRO_KERNELS.items()}
    got = run_kernels(kernels, {"A": a, "W": weights}, semantics=semantics)["C"].reshape(m, n)
    exact = a.astype(np.float64) @ weights.astype(np.float64)
    float32 = _relative_error(a @ weights, exact)
    assert _relative_error(got, exact) <= 2 * float32 + 1e-7


def test_split_parts_sum_exactly_and_keep_non_finite_values():
    """x = x0 + x1 + x2 exactly for float32 values from 1e-30 to 3e38; inf and nan
    keep only their first part, so that products give inf / nan as float32 ones do."""
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-25, 30, 200),
                             [0.0, -0.0, 1.0, 3.0e38, -1e-30, np.inf, -np.inf, np.nan]])
    values = values.astype(np.float32)
    X = te.placeholder((values.size,), name="X")
    parts = [te.compute(X.shape, lambda i, p=p: amx_split.split_parts(X[i])[p].astype("float32"),
                        name=f"P{p}") for p in range(3)]
    got = run(Graph.from_outputs(parts), {"X": values})
    total = got[0].astype(np.float64) + got[1] + got[2]
    finite = np.isfinite(values)
    np.testing.assert_array_equal(total[finite], values[finite].astype(np.float64))
    assert np.all(got[1][~finite] == 0) and np.all(got[2][~finite] == 0)
    np.testing.assert_array_equal(got[0][~finite], values[~finite])


def test_applies_only_where_the_spec_declares_the_micro_kernel(monkeypatch):
    """A CPU without AMX (its spec lacks amx_split_f32), a non-constant B, too few columns
    or k, A read through a strided gather, or the switch at 0: the AVX-512 path."""
    rng = np.random.default_rng(4)
    _, _, C = _matmul(64, 512, 512, rng)
    contraction = as_contraction(C)
    icelake = X86Avx512Target(cpu="icelake-server", cores=1)
    assert not amx_split.amx_split_applies(contraction, LoweringOptions.from_spec(icelake.spec))
    spr = X86Avx512Target(cpu="sapphirerapids", cores=1)
    options = LoweringOptions.from_spec(spr.spec)
    assert AMX_SPLIT_F32.name in {d.name for d in spr.spec.micro_kernels}
    if amx_permitted():
        assert amx_split.amx_split_applies(contraction, options)
        monkeypatch.setenv(amx_split.SWITCH, "0")
        assert not amx_split.amx_split_applies(contraction, options)
    variable = ops.matmul(te.placeholder((64, 512), name="A"),
                          te.placeholder((512, 512), name="B"))
    assert not amx_split.amx_split_applies(as_contraction(variable), options)
    for k, n in ((512, 256), (256, 512)):   # ResNet-50's 1x1 convolutions lose there
        _, _, C = _matmul(64, k, n, rng)
        assert not amx_split.amx_split_applies(as_contraction(C), options)
    # every other row of X (a strided 1x1 convolution's pixels): a gather, not rows in place
    X = te.placeholder((128, 512), name="X")
    c = te.reduce_axis(512, "c")
    weights = te.constant(np.ones((512, 512), np.float32), name="V")
    strided = te.compute((64, 512), lambda i, o: te.sum(X[2 * i, c] * weights[c, o], axis=c),
                         name="Y")
    assert as_contraction(strided) is not None
    assert not amx_split.amx_split_applies(as_contraction(strided), options)


def test_k_slices_keep_enough_rows_in_half_of_l2():
    assert amx_split.k_slices(768, 1 << 21) == (1, 768)
    assert amx_split.k_slices(3072, 1 << 21) == (3, 1024)
    assert amx_split.k_slices(300, SMALL_L2) == (10, 32)
    slices, kc = amx_split.k_slices(5000, 1 << 20)
    assert slices * kc >= 5000 and 6 * amx_split.MIN_BLOCK_ROWS * kc <= 1 << 19


def test_render_checks_k():
    with pytest.raises(CodegenError, match="amx_split_f32.*KS"):
        render(AMX_SPLIT_F32.name, {"KK": 64, "KS": 3}, "f")


@needs(*AMX)
@_native_amx()
@pytest.mark.parametrize("decl", [AMX_SPLIT_F32, AMX_SPLIT_F32_ACC], ids=lambda d: d.name)
@pytest.mark.parametrize("kk", [32, 96])
def test_micro_kernel_matches_its_declared_semantics(decl, kk):
    """The rendered kernel on strided operands (A's rows and C's a row stride apart) equals
    the declaration's semantics."""
    steps = kk // 32
    text = render(decl.name, {"KK": kk, "KS": steps}, "mk")
    text = text.replace("alwaysinline nounwind", "nounwind").replace("define internal", "define")
    for name, ret, args in LLVM_DECLARATIONS[decl.name]:
        text += f"\ndeclare {ret} @{name}({', '.join(args)})\n"
    jit = build.jit_compile(text)
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn = ctypes.CFUNCTYPE(None, ptr, *[i64] * 4, ptr, *[i64] * 6, ptr, i64, i64)(
        jit.address("mk"))
    rng = np.random.default_rng(kk)
    import ml_dtypes

    # tiles of A with rows 48 elements apart (not packed), steps and parts padded
    a = rng.standard_normal((steps, 4, 33, 48)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((steps, 3, 2, 16, 16, 2)).astype(ml_dtypes.bfloat16)
    c = np.full((32, 48), 7.0, np.float32)
    expected = c.copy()
    a_view = a[:, :3, :32, :32]
    decl.reference(a_view, b, expected[:, :32], KK=kk, KS=steps)
    a_strides = [stride // 2 for stride in a.strides]
    b_strides = [stride // 2 for stride in b.strides]
    fn(a.ctypes.data, *a_strides, b.ctypes.data, *b_strides, c.ctypes.data, 48, 1)
    np.testing.assert_allclose(c[:, :32], expected[:, :32], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(c[:, 32:], 7.0)   # the columns past the tile untouched


@needs(*AMX)
@_native_amx()
@pytest.mark.parametrize("m, k, n", SHAPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_native_matmul_is_float32_accurate(m, k, n, threads, any_size):
    rng = np.random.default_rng(m + k * n)
    A, weights, C = _matmul(m, k, n, rng)
    exe = tc.compile(C, target=X86Avx512Target(threads=threads))
    assert exe.kernels[-1].attrs["micro_kernel"] == AMX_SPLIT_F32.name, exe.report
    a = rng.standard_normal((m, k)).astype(np.float32)
    exact = a.astype(np.float64) @ weights.astype(np.float64)
    assert _relative_error(exe(a), exact) <= 2 * _relative_error(a @ weights, exact) + 1e-7


@needs(*AMX)
@_native_amx()
@pytest.mark.parametrize("threads", [1, 2])
def test_native_matmul_in_k_slices_with_a_fused_residual(threads, any_size):
    """K = 2999 in slices of k (the first written, the others added, a ragged last one), a
    residual add fused after the last slice."""
    rng = np.random.default_rng(threads)
    X = te.placeholder((70, 2999), name="X")
    R = te.placeholder((70, 67), name="R")
    w = rng.standard_normal((2999, 67)).astype(np.float32)
    product = ops.matmul(X, te.constant(w, name="W"), name="P")
    out = te.compute(product.shape, lambda i, j: product[i, j] + R[i, j], name="Y")
    exe = tc.compile(Graph.from_outputs([out]), target=X86Avx512Target(threads=threads))
    main = [k for k in exe.kernels if k.attrs.get("micro_kernel") == AMX_SPLIT_F32.name]
    assert main and "k-slices(1)" not in main[-1].attrs["schedule"], exe.report
    x = rng.standard_normal((70, 2999)).astype(np.float32)
    r = rng.standard_normal((70, 67)).astype(np.float32)
    exact = x.astype(np.float64) @ w.astype(np.float64) + r
    float32 = _relative_error(x @ w + r, exact)
    assert _relative_error(exe(x, r), exact) <= 2 * float32 + 1e-7


@needs(*AMX)
@_native_amx()
def test_non_finite_inputs_give_non_finite_rows_only(any_size):
    """An inf or nan in A makes its row of C non-finite (nan where float32 gives inf: inf
    meets the other operand's lower parts, which may be 0 or of the other sign) and leaves
    the other rows finite and accurate."""
    rng = np.random.default_rng(5)
    A, weights, C = _matmul(40, 35, 33, rng)
    exe = tc.compile(C, target=X86Avx512Target(threads=1))
    a = rng.standard_normal((40, 35)).astype(np.float32)
    a[3, 7], a[11, 0] = np.inf, np.nan
    got, expected = exe(a), a @ weights
    bad = np.zeros(40, bool)
    bad[[3, 11]] = True
    assert not np.isfinite(got[bad]).any()
    np.testing.assert_allclose(got[~bad], expected[~bad], rtol=1e-5, atol=1e-5)


@needs(*AMX)
@_native_amx()
@pytest.mark.parametrize("m", [37, 64])
def test_fused_epilogues_in_place_and_through_the_local_tile(m, any_size):
    """A bias + GELU consumer (in place on each finished panel) and a split into heads
    (each element where the consumer has it, through the local tile) fuse into the kernel."""
    rng = np.random.default_rng(m)
    X = te.placeholder((m, 96), name="X")
    w = te.constant(rng.standard_normal((96, 128)).astype(np.float32), name="W")
    bias = te.constant(rng.standard_normal(128).astype(np.float32), name="bias")
    hidden = ops.matmul(X, w, name="H")
    gelu = te.compute(hidden.shape, lambda i, j: 0.5 * (hidden[i, j] + bias[j]) * (
        1.0 + te.erf((hidden[i, j] + bias[j]) * 0.7071067811865476)), name="G")
    heads = te.compute((2, m, 64), lambda h, s, d: hidden[s, h * 64 + d], name="Q")
    for consumer in (gelu, heads):
        graph = Graph.from_outputs([consumer])
        exe = tc.compile(graph, target=X86Avx512Target(threads=2))
        main = [k for k in exe.kernels if k.attrs.get("micro_kernel") == AMX_SPLIT_F32.name]
        assert main and main[-1].attrs.get("fused") == ["H", consumer.name], exe.report
        x = rng.standard_normal((m, 96)).astype(np.float32)
        np.testing.assert_allclose(exe(x), run(graph, {"X": x}), rtol=1e-5, atol=1e-5)



#: a fresh process: whether it holds the tile state before and after loading a library
PERMISSION_PROBE = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)

def granted():
    bits = ctypes.c_uint64(0)
    libc.syscall(158, 0x1022, ctypes.byref(bits))   # arch_prctl(ARCH_GET_XCOMP_PERM)
    return bits.value >> 18 & 1                      # XFEATURE_XTILEDATA

before = granted()
ctypes.CDLL(sys.argv[1])
print(before, granted())
"""


@needs(*AMX)
@_native_amx()
def test_an_exported_library_asks_for_the_tile_state_itself(tmp_path, any_size):
    """A program loading an exported library whose kernels use AMX tiles (a C program, here a
    bare Python one) holds the tile state once the library is loaded: its constructor asks
    Linux (without it the first tile instruction would kill the program with SIGILL). A
    library without tile code asks nothing."""
    import subprocess
    import sys

    rng = np.random.default_rng(8)
    _, _, C = _matmul(70, 96, 64, rng)
    target = X86Avx512Target(threads=1)
    exe = tc.compile(C, target=target)
    assert any(c.kernel.attrs.get("micro_kernel") == AMX_SPLIT_F32.name for c in exe.compiled)
    tiles = target.export_shared_library([c.source for c in exe.compiled], tmp_path / "t.so")
    plain = tc.compile(te.compute((8,), lambda i: te.placeholder((8,), name="X")[i] * 2.0,
                                  name="Y"), target=target)
    none = target.export_shared_library([c.source for c in plain.compiled], tmp_path / "p.so")
    for library, expected in ((tiles, "0 1"), (none, "0 0")):
        result = subprocess.run([sys.executable, "-c", PERMISSION_PROBE, str(library)],
                                capture_output=True, text=True, timeout=60)
        assert result.stdout.split() == expected.split(), (library, result.stderr)


AMX_MAIN = r"""
#include <stdio.h>
#include "prog.h"
int main(void) {
    static float A[70 * 96], Y[70 * 64];
    FILE *f = fopen("A.bin", "rb");
    if (!f || fread(A, 4, 70 * 96, f) != 70 * 96) { return 3; }
    fclose(f);
    if (prog_run(A, Y) != 0) { return 4; }
    f = fopen("Y.bin", "wb");
    fwrite(Y, 4, 70 * 64, f);
    fclose(f);
    return 0;
}
"""


@needs(*AMX)
@_native_amx()
def test_a_c_program_runs_the_tile_kernels_with_their_weights(tmp_path, any_size):
    """The user's whole path: an exported library whose product runs on AMX tiles, its weights
    in the library, called from C (which asks Linux for nothing itself)."""
    import shutil

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    rng = np.random.default_rng(9)
    _, weights, C = _matmul(70, 96, 64, rng)
    graph = Graph.from_outputs([C])
    target = X86Avx512Target(threads=1)
    exe = tc.compile(graph, target=target)
    assert any(c.kernel.attrs.get("micro_kernel") == AMX_SPLIT_F32.name for c in exe.compiled)
    target.export([(c.kernel, c.source) for c in exe.compiled], graph, tmp_path, "prog")
    a = rng.standard_normal((70, 96)).astype(np.float32)
    a.tofile(tmp_path / "A.bin")
    result = run_c_program(tmp_path, AMX_MAIN)
    assert result.returncode == 0, (result.returncode, result.stderr)
    got = np.fromfile(tmp_path / "Y.bin", dtype=np.float32).reshape(70, 64)
    exact = a.astype(np.float64) @ weights.astype(np.float64)
    assert _relative_error(got, exact) <= 2 * _relative_error(a @ weights, exact) + 1e-7
