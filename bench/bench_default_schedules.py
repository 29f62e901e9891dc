"""Default-schedule kernels (no tuning) against numpy and PyTorch: GEMM, conv2d, softmax.

Prints median times and ratios (time of the other library / time of tilecraft: > 1 means
tilecraft is faster). Run: `make bench` or `.venv/bin/python bench/bench_default_schedules.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from common import geomean, load_torch, median_seconds, print_table  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft import ops, te  # noqa: E402


def bench_gemm(torch) -> list[list[str]]:
    rows = []
    for m, k, n in [(256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (128, 768, 3072)]:
        A = te.placeholder((m, k), name="A")
        B = te.placeholder((k, n), name="B")
        C = ops.matmul(A, B)
        exe = tc.compile(C, target="x86_avx512")
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        np.testing.assert_allclose(exe(A=a, B=b), a @ b, rtol=1e-3, atol=1e-3)
        ours = median_seconds(lambda: exe(A=a, B=b), repeat=5)
        numpy_t = median_seconds(lambda: a @ b, repeat=5)
        row = [f"{m}x{k}x{n}", f"{ours * 1e3:.2f}", f"{2 * m * n * k / ours / 1e9:.1f}",
               f"{numpy_t * 1e3:.2f}", f"{numpy_t / ours:.3f}"]
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            torch_t = median_seconds(lambda: torch.mm(ta, tb), repeat=5)
            row += [f"{torch_t * 1e3:.2f}", f"{torch_t / ours:.3f}"]
        rows.append(row)
    return rows


def bench_conv2d(torch) -> list[list[str]]:
    rows = []
    layers = [(1, 64, 56, 64, 3, 1, 1), (1, 128, 28, 128, 3, 1, 1), (1, 256, 14, 256, 1, 1, 0),
              (1, 64, 56, 128, 3, 2, 1)]
    for n, c, hw, k, r, stride, pad in layers:
        X = te.placeholder((n, c, hw, hw), name="X")
        W = te.placeholder((k, c, r, r), name="W")
        Y = ops.conv2d(X, W, stride=stride, padding=pad)
        exe = tc.compile(Y, target="x86_avx512")
        rng = np.random.default_rng(0)
        x = rng.standard_normal((n, c, hw, hw), dtype=np.float32)
        w = rng.standard_normal((k, c, r, r), dtype=np.float32)
        ours = median_seconds(lambda: exe(X=x, W=w), repeat=3)
        flops = 2 * np.prod(Y.shape) * c * r * r
        row = [f"c{c} {hw}x{hw} k{k} {r}x{r} s{stride}", f"{ours * 1e3:.2f}",
               f"{flops / ours / 1e9:.1f}"]
        if torch is not None:
            tx, tw = torch.from_numpy(x), torch.from_numpy(w)
            conv = torch.nn.functional.conv2d
            ref = conv(tx, tw, stride=stride, padding=pad).numpy()
            np.testing.assert_allclose(exe(X=x, W=w), ref, rtol=1e-3, atol=1e-2)
            torch_t = median_seconds(lambda: conv(tx, tw, stride=stride, padding=pad), repeat=3)
            row += [f"{torch_t * 1e3:.2f}", f"{torch_t / ours:.3f}"]
        rows.append(row)
    return rows


def bench_softmax(torch) -> list[list[str]]:
    rows = []
    for m, n in [(256, 1024), (1024, 1024), (4096, 128)]:
        X = te.placeholder((m, n), name="X")
        Y = ops.softmax(X, axis=1)
        exe = tc.compile(Y, target="x86_avx512")
        x = np.random.default_rng(0).standard_normal((m, n), dtype=np.float32)

        def numpy_softmax():
            e = np.exp(x - x.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)

        np.testing.assert_allclose(exe(X=x), numpy_softmax(), rtol=1e-4, atol=1e-6)
        ours = median_seconds(lambda: exe(X=x))
        numpy_t = median_seconds(numpy_softmax)
        row = [f"{m}x{n}", f"{ours * 1e3:.3f}", f"{numpy_t * 1e3:.3f}", f"{numpy_t / ours:.3f}"]
        if torch is not None:
            tx = torch.from_numpy(x)
            torch_t = median_seconds(lambda: torch.softmax(tx, dim=1))
            row += [f"{torch_t * 1e3:.3f}", f"{torch_t / ours:.3f}"]
        rows.append(row)
    return rows


def main() -> None:
    import os

    threads = os.cpu_count() or 1
    torch = load_torch(threads)
    print(f"default schedules (no tuning), {threads} threads; torch: "
          f"{'not installed' if torch is None else torch.__version__}")
    extra = ["torch ms", "torch/ours"] if torch is not None else []
    gemm = bench_gemm(torch)
    print_table("GEMM fp32", ["shape", "ours ms", "GFLOP/s", "numpy ms", "numpy/ours", *extra],
                gemm)
    conv = bench_conv2d(torch)
    print_table("conv2d fp32 NCHW", ["layer", "ours ms", "GFLOP/s", *extra], conv)
    soft = bench_softmax(torch)
    print_table("softmax fp32 (5 kernels)", ["shape", "ours ms", "numpy ms", "numpy/ours",
                                             *extra], soft)
    print(f"\ngeomean numpy/ours: GEMM {geomean([float(r[4]) for r in gemm]):.3f}, softmax "
          f"{geomean([float(r[3]) for r in soft]):.3f}")


if __name__ == "__main__":
    main()
