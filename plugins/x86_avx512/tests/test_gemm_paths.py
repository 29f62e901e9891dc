"""The fp32 template's two faster paths, natively, against numpy and the reference:
A read in place (``outer_product_f32_rows``, ``PACK_A=0``) and B packed per block of panels
inside the parallel loop (``NC > 0``, :mod:`tilecraft_x86_avx512.blocking.block_packed`)."""

import ctypes

import numpy as np
import pytest
from template_forcing import ForcedTarget
from tilecraft_x86_avx512 import build
from tilecraft_x86_avx512.blocking.block_packed import lower_block_packed
from tilecraft_x86_avx512.blocking.register_tiles import Blocking, lower_contraction
from tilecraft_x86_avx512.gemm_template import block_panels, default_config
from tilecraft_x86_avx512.microkernels import MICRO_KERNELS, OUTER_PRODUCT_F32_ROWS, render

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import as_contraction
from tilecraft.reference import run


def test_rows_micro_kernel_matches_its_declared_semantics():
    """A read as rows [MV, KI] with a row stride; rows past MV and columns past NC untouched."""
    rng = np.random.default_rng(0)
    for mi, nr, ki, mv, nc in [(5, 80, 7, 5, 80), (1, 16, 1, 1, 16), (6, 64, 13, 4, 50),
                               (3, 32, 2, 1, 1)]:
        text = render(OUTER_PRODUCT_F32_ROWS.name,
                      {"MI": mi, "NR": nr, "KI": ki, "MV": mv, "NC": nc}, "mk")
        text = text.replace("alwaysinline nounwind", "nounwind").replace(
            "define internal", "define")
        text += ("\ndeclare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, "
                 "<16 x float>)\ndeclare <16 x float> @llvm.masked.load.v16f32.p0(ptr, "
                 "<16 x i1>, <16 x float>)\ndeclare void @llvm.masked.store.v16f32.p0("
                 "<16 x float>, ptr, <16 x i1>)\n")
        fn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64] * 3))(
            build.jit_compile(text).address("mk"))
        a = rng.standard_normal((mv, ki + 5)).astype(np.float32)  # row stride ki + 5
        b = rng.standard_normal((ki, nr)).astype(np.float32)
        c = rng.standard_normal((mi, nr + 16)).astype(np.float32)
        expected = c.copy()
        expected[:mv, :nc] += a[:, :ki] @ b[:, :nc]
        fn(a.ctypes.data, ki + 5, 1, b.ctypes.data, nr, 1, c.ctypes.data, nr + 16, 1)
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(CodegenError, match="MV x NC"):
        render(OUTER_PRODUCT_F32_ROWS.name, {"MI": 2, "NR": 16, "MV": 3}, "mk")


@pytest.mark.parametrize("m, n, k", [(37, 129, 61), (1, 17, 200), (97, 17, 3), (7, 300, 1),
                                     (64, 64, 64), (13, 31, 97)])
@pytest.mark.parametrize("extra", [
    {"PACK_A": 0, "PACK_B": 1}, {"PACK_A": 0, "PACK_B": 1, "NC": 3},
    {"PACK_A": 0, "PACK_B": 1, "NC": 1}, {"PACK_A": 1, "PACK_B": 1, "NC": 2},
    {"PACK_A": 0, "PACK_B": 0}, {"PACK_A": 0, "PACK_B": 0, "NC": 3},
    {"PACK_A": 1, "PACK_B": 0}])
def test_matmul_paths_native(m, n, k, extra):
    """Awkward shapes (primes, size 1, k slices that do not divide K) on every path; NC with
    PACK_A=1 keeps B packed by its own kernel (the block path reads A in place). B is read in
    place (PACK_B=0) only where A is too: its ragged last panel reads nothing past B's end
    (masked loads), which the shapes whose columns are not a multiple of 16 check."""
    rng = np.random.default_rng(m * n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    config = {"MI": 5, "NR": 32, "KC": 16, "MC": 10, **extra}
    C = ops.matmul(te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B"),
                   name="C")
    exe = tc.compile(C, target=ForcedTarget(config, "C"))
    np.testing.assert_allclose(exe(a, b), a @ b, rtol=1e-4, atol=1e-4)
    schedule = exe.kernels[-1].attrs["schedule"]
    if m > 1 and k > 1 and not extra["PACK_A"]:
        assert "A read in place" in schedule
        assert ("B read in place" in schedule) == (n > 1 and not extra["PACK_B"])
        assert ("per block" in schedule) == ("NC" in extra and "B read in place" not in schedule)
        assert len(exe.kernels) == (1 if "NC" in extra or "B read in place" in schedule else 2)
    else:  # no m or k axis to view A by, or packing asked for: A is packed, and so is B
        assert "A read in place" not in schedule
        assert "B read in place" not in schedule


@pytest.mark.parametrize("channels, size, kernel, stride, padding", [
    (3, 17, 7, 2, 3), (5, 9, 3, 1, 1), (2, 11, 3, 2, 0), (1, 1, 1, 1, 0), (4, 13, 3, 1, 1)])
@pytest.mark.parametrize("nc", [0, 2])
def test_conv2d_paths_native(channels, size, kernel, stride, padding, nc):
    """Convolutions (stride 2, padding 0/1/3, a 1x1 image) with A (the weights) read in place,
    B (the im2col'd input) packed first or per block."""
    x = te.placeholder((1, channels, size, size), name="x")
    w = te.placeholder((11, channels, kernel, kernel), name="w")
    y = ops.conv2d(x, w, stride=stride, padding=padding, name="y")
    graph = tc.Graph.from_outputs([y])
    rng = np.random.default_rng(channels * size)
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    config = {"MI": 3, "NR": 16, "KC": 7, "MC": 6, "PACK_A": 0, "NC": nc}
    exe = tc.compile(graph, target=ForcedTarget(config, "y"))
    np.testing.assert_allclose(exe(**inputs), run(graph, inputs), rtol=1e-4, atol=1e-4)
    assert ("A read in place" in exe.kernels[-1].attrs["schedule"]) == (channels * kernel > 1)


def test_block_packed_interpreted_and_batched():
    """The block-packed kernel in the Kernel IR interpreter (a batch matmul: B and A per batch,
    blocks that do not divide the panels), and None when A is not a row-major view."""
    rng = np.random.default_rng(5)
    X = te.placeholder((3, 7, 9), name="X")
    Y = te.placeholder((3, 9, 71), name="Y")
    Z = ops.batch_matmul(X, Y, name="Z")
    options = LoweringOptions(vector_lanes=4, cores=2)
    kernels = lower_block_packed(as_contraction(Z), OUTER_PRODUCT_F32_ROWS.name,
                                 Blocking(mi=2, nr=16, kc=4, mc=4), 2, options)
    assert kernels is not None and len(kernels) == 1
    x = rng.standard_normal((3, 7, 9)).astype(np.float32)
    y = rng.standard_normal((3, 9, 71)).astype(np.float32)
    arrays = {"X": x, "Y": y, "Z": np.zeros((3, 7, 71), np.float32)}
    out = run_kernels(kernels, arrays,
                      semantics={name: decl.reference for name, decl in MICRO_KERNELS.items()})
    np.testing.assert_allclose(out["Z"].reshape(3, 7, 71), x @ y, rtol=1e-5, atol=1e-5)
    # A stored transposed (read A[k, m]): no row view, the caller falls back to packing A
    At = te.placeholder((9, 7), name="At")
    kk = te.reduce_axis(9, "kk")
    B = te.placeholder((9, 23), name="B")
    C = te.compute((7, 23), lambda i, j: te.sum(At[kk, i] * B[kk, j], axis=[kk]), name="C")
    assert lower_block_packed(as_contraction(C), OUTER_PRODUCT_F32_ROWS.name,
                              Blocking(mi=2, nr=4, kc=4, mc=4), 2, options) is None
    kernels = lower_contraction(as_contraction(C), "outer_product_f32",
                                Blocking(mi=2, nr=4, kc=4, mc=4, pack_a=False), options,
                                rows_micro_kernel=OUTER_PRODUCT_F32_ROWS.name)
    assert "A read in place" not in kernels[-1].attrs["schedule"]


def test_default_config_chooses_the_paths():
    """A in place by default; B per block only for a convolution's im2col with enough panels
    for the threads (a matmul's B is packed once by its own kernel)."""
    matmul = as_contraction(ops.matmul(te.placeholder((512, 512), name="A"),
                                       te.placeholder((512, 512), name="B")))
    config = default_config(matmul, 49152, 1 << 20, threads=2)
    assert config["PACK_A"] == 0 and config["NC"] == 0
    x = te.placeholder((1, 64, 112, 112), name="x")
    w = te.placeholder((192, 64, 3, 3), name="w")
    conv = as_contraction(ops.conv2d(x, w, padding=1))
    for threads in (1, 2, 3):
        nc = block_panels(conv, 80, threads)
        panels = -(-112 * 112 // 80)
        blocks = -(-panels // nc)
        assert 0 < nc <= 8 and blocks % threads == 0 or blocks * nc - panels < nc
    small = as_contraction(ops.conv2d(te.placeholder((1, 64, 7, 7), name="x"),
                                      te.placeholder((64, 64, 3, 3), name="w"), padding=1))
    assert block_panels(small, 64, threads=2) == 0  # one panel: B packed first, rows parallel


def test_narrow_product_takes_a_tile_the_template_renders():
    """N = 8: Eq. 3.4 alone would pick a 29-row tile (one accumulator column), above the
    template's maximum MI; the candidates stay within it."""
    from tilecraft.reference import run

    A = te.placeholder((307, 16), name="A")
    B = te.placeholder((16, 8), name="B")
    C = ops.matmul(A, B, name="C")
    exe = tc.compile(C, target="x86_avx512")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((307, 16)).astype(np.float32)
    b = rng.standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_allclose(exe(a, b), run(C, {"A": a, "B": b}), rtol=1e-4, atol=1e-4)


_GUARDED_B = r"""
import ctypes, mmap, sys
import numpy as np
import tilecraft as tc
from tilecraft import ops, te
from template_forcing import ForcedTarget
m, k, n, nc = (int(v) for v in sys.argv[1:5])
page = mmap.PAGESIZE
nbytes = 4 * k * n
pages = -(-nbytes // page) + 1
memory = mmap.mmap(-1, (pages + 1) * page)
base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(base + pages * page, page, 0) == 0   # PROT_NONE: reading it faults
b = np.frombuffer(memory, np.float32, k * n, pages * page - nbytes).reshape(k, n)
b[...] = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
a = np.random.default_rng(1).standard_normal((m, k)).astype(np.float32)
config = {"MI": 5, "NR": 64, "KC": 16, "MC": 10, "PACK_A": 0, "PACK_B": 0,
          **({"NC": nc} if nc else {})}
C = ops.matmul(te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B"), name="C")
exe = tc.compile(C, target=ForcedTarget(config, "C"))
assert "B read in place" in exe.kernels[-1].attrs["schedule"]
np.testing.assert_allclose(exe(a, b), a @ b, rtol=1e-4, atol=1e-4)
print("ok")
"""


@pytest.mark.parametrize("m, k, n, nc", [(13, 37, 50, 0), (7, 20, 113, 2), (11, 3, 17, 0)])
def test_b_read_in_place_reads_nothing_past_its_end(tmp_path, m, k, n, nc):
    """B read in place ends where the process may not read (the next page PROT_NONE): the
    ragged last panel's partial vectors are masked loads, so nothing past B's last column is
    touched (a plain load of the whole vector would fault). Run in a child process, so a fault
    fails this test instead of the session."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "guarded.py"
    script.write_text(_GUARDED_B)
    here = str(Path(__file__).parent)
    result = subprocess.run([sys.executable, str(script), str(m), str(k), str(n), str(nc)],
                            capture_output=True, text=True, timeout=300, cwd=here,
                            env={**__import__("os").environ, "PYTHONPATH": here})
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), \
        f"rc={result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
