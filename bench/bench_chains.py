"""Fused batch-GEMM chains (thesis Table 3.5, G1-G12) vs PyTorch and numpy, 1 and 2 threads.

Each chain is ``(batch, M, K) x (batch, K, L)`` then ``x (batch, L, N)``, plain and with a
softmax over ``L`` between. tilecraft fuses each into one kernel (``Target.fuse``); PyTorch
eager runs ``bmm``/``softmax``/``bmm``; numpy runs ``matmul`` twice (unfused) with its default
OpenBLAS kernel and, in a subprocess, with ``OPENBLAS_CORETYPE=SkylakeX`` (the AVX-512 kernel).
Prints GFLOP/s, the ratios and their geomeans, and the compile time of each chain.
Run: ``python bench/bench_chains.py`` (``--quick``: G1, G4, G10; ``--threads 1``: one thread
count only).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
from common import (
    ceiling_note,
    geomean,
    load_torch,
    measured_ceiling_flops,
    median_seconds,
    print_table,
)
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te

#: name: (batch, M, N, K, L), thesis Table 3.5
CHAINS = {
    "G1": (8, 512, 64, 64, 512), "G2": (12, 512, 64, 64, 512), "G3": (16, 512, 64, 64, 512),
    "G4": (12, 256, 64, 64, 256), "G5": (16, 256, 64, 64, 256), "G6": (16, 256, 80, 80, 256),
    "G7": (12, 208, 64, 64, 208), "G8": (16, 208, 64, 64, 208), "G9": (16, 208, 80, 80, 208),
    "G10": (1, 512, 64, 64, 256), "G11": (1, 768, 64, 64, 384), "G12": (1, 1024, 64, 64, 512),
}

_NUMPY = """
import json, sys
import numpy as np
sys.path.insert(0, {here!r})
from common import median_seconds
out = {{}}
for name, (b, m, n, k, l), softmax in json.loads(sys.argv[1]):
    a = np.random.rand(b, m, k).astype(np.float32)
    x = np.random.rand(b, k, l).astype(np.float32)
    d = np.random.rand(b, l, n).astype(np.float32)
    def run():
        t = a @ x
        if softmax:
            t = np.exp(t - t.max(-1, keepdims=True))
            t /= t.sum(-1, keepdims=True)
        return t @ d
    out[name] = median_seconds(run, repeat=7)
print(json.dumps(out))
"""


def _numpy_times(jobs, threads: int, coretype: str | None) -> dict[str, float]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    code = _NUMPY.format(here=os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", code, json.dumps(jobs)], env=env,
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def _program(b, m, n, k, l, softmax):
    A = te.placeholder((b, m, k), name="A")
    B = te.placeholder((b, k, l), name="B")
    D = te.placeholder((b, l, n), name="D")
    T = ops.batch_matmul(A, B, name="T")
    return ops.batch_matmul(ops.softmax(T, name="S") if softmax else T, D, name="E")


def main() -> None:
    names = ["G1", "G4", "G10"] if "--quick" in sys.argv else list(CHAINS)
    thread_counts = (1, 2)
    if "--threads" in sys.argv:
        thread_counts = tuple(int(t) for t in
                              sys.argv[sys.argv.index("--threads") + 1].split(","))
    rng = np.random.default_rng(0)
    for threads in thread_counts:
        torch = load_torch(threads)
        for softmax in (False, True):
            jobs = [[name, CHAINS[name], softmax] for name in names]
            plain = _numpy_times(jobs, threads, None)
            avx512 = _numpy_times(jobs, threads, "SkylakeX")
            rows, vs_torch, vs_blas = [], [], []
            for name in names:
                b, m, n, k, l = CHAINS[name]
                flop = 2 * b * m * l * (k + n)
                start = time.perf_counter()
                exe = tc.compile(_program(b, m, n, k, l, softmax),
                                 target=X86Avx512Target(threads=threads))
                compile_s = time.perf_counter() - start
                fused = any(k.attrs.get("fused") for k in exe.kernels)
                a = rng.standard_normal((b, m, k)).astype(np.float32)
                x = rng.standard_normal((b, k, l)).astype(np.float32)
                d = rng.standard_normal((b, l, n)).astype(np.float32)
                ours = median_seconds(lambda: exe(a, x, d), repeat=9)
                torch_s = float("nan")
                if torch is not None:
                    ta, tx, td = map(torch.from_numpy, (a, x, d))
                    if softmax:
                        def run_torch():
                            return torch.bmm(torch.softmax(torch.bmm(ta, tx), -1), td)
                    else:
                        def run_torch():
                            return torch.bmm(torch.bmm(ta, tx), td)
                    expected = run_torch().numpy()
                    np.testing.assert_allclose(exe(a, x, d), expected, rtol=1e-3,
                                               atol=1e-3 * np.abs(expected).max())
                    torch_s = median_seconds(run_torch, repeat=9)
                vs_torch.append(torch_s / ours)
                vs_blas.append(avx512[name] / ours)
                rows.append([name, "yes" if fused else "no",
                             *(f"{flop / s / 1e9:.0f}" for s in (ours, torch_s, plain[name],
                                                                  avx512[name])),
                             f"{flop / ours / measured_ceiling_flops(threads)[0]:.0%}",
                             f"{torch_s / ours:.2f}", f"{avx512[name] / ours:.2f}",
                             f"{compile_s:.2f}"])
            rows.append(["geomean", "", "", "", "", "", "", f"{geomean(vs_torch):.2f}",
                         f"{geomean(vs_blas):.2f}", ""])
            print_table(f"batch-GEMM chains{' with softmax' if softmax else ''}, GFLOP/s, "
                        f"{threads} thread(s); {ceiling_note(threads)}",
                        ["chain", "fused", "tilecraft", "torch", "numpy", "numpy-avx512",
                         "% peak", "vs torch", "vs avx512", "compile s"], rows)


if __name__ == "__main__":
    main()
