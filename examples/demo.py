"""The bundled example: GEMM -> softmax -> relu compiled for the host CPU (x86_avx512),
checked against the numpy reference interpreter and timed against numpy.

Run with `make demo` (or `.venv/bin/python examples/demo.py`).
"""

from __future__ import annotations

import time

import numpy as np

import tilecraft as tc
from tilecraft import ops, te


def numpy_version(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    c = a @ b
    e = np.exp(c - c.max(axis=1, keepdims=True))
    return np.maximum(e / e.sum(axis=1, keepdims=True), 0.0)


def median_seconds(fn, repeat: int = 30) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    M, K, N = 256, 512, 384
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = ops.relu(ops.softmax(C, axis=1))
    graph = tc.Graph.from_outputs([D])
    print(graph)
    print()

    start = time.perf_counter()
    exe = tc.compile(graph, target="x86_avx512")
    print(f"compiled {len(exe.kernels)} kernels in {time.perf_counter() - start:.2f} s")

    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    out = exe(A=a, B=b)
    expected = tc.reference.run(graph, A=a, B=b)
    error = float(np.max(np.abs(out - expected)))
    ok = np.allclose(out, expected, rtol=1e-4, atol=1e-5)
    print(f"check against the reference interpreter: max abs error {error:.2e} -> "
          f"{'OK' if ok else 'MISMATCH'}")

    ours = median_seconds(lambda: exe(A=a, B=b))
    theirs = median_seconds(lambda: numpy_version(a, b))
    print(f"median time: tilecraft {ours * 1e3:.2f} ms, numpy {theirs * 1e3:.2f} ms "
          f"(tilecraft/numpy time ratio {ours / theirs:.2f}; default schedules, no tuning)")
    print()
    print(exe.report)
    print()
    from tilecraft.target.registry import format_target_table

    print(format_target_table(tc.list_targets()))
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
