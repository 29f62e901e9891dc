"""GEMM: tilecraft's micro-kernel template vs numpy (OpenBLAS) and PyTorch, 1 and 2 threads.

For each shape (square 256…2048 and the skinny GEMMs of BERT-base layers) this prints GFLOP/s of

- ``default``: the template's untuned parameters (Eq. 3.4 tile, cache-sized KC/MC);
- ``tuned``: the best of a small sweep over the template's free parameters (register tile from
  the top Eq. 3.4 candidates, KC), measured here;
- numpy as installed (its OpenBLAS picks the AVX2 "Haswell" kernel on this CPU) and numpy with
  ``OPENBLAS_CORETYPE=SkylakeX`` (the AVX-512 kernel), both timed in subprocesses with the
  thread count set (OpenBLAS reads both variables when it loads), and PyTorch eager (MKL);

and the ratios tuned/OpenBLAS-AVX512 and tuned/PyTorch. Run: ``python bench/bench_gemm.py``
(``--quick`` for three shapes; ``--shapes 256x256x256,512x768x768`` (MxNxK) for a subset;
``--threads 1`` for one thread count).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import numpy as np
from common import (
    ceiling_note,
    geomean,
    load_torch,
    measured_ceiling_flops,
    median_seconds,
    print_table,
)
from tilecraft_x86_avx512.gemm_template import default_config, tile_candidates
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.passes.contraction import as_contraction

SQUARE = [(n, n, n) for n in (256, 512, 1024, 2048)]
SKINNY = [(128, 2304, 768), (512, 768, 768), (512, 3072, 768), (512, 768, 3072)]


class _Configured(X86Avx512Target):
    def __init__(self, threads: int, config: dict[str, int] | None) -> None:
        super().__init__(threads=threads)
        self.config = config

    def lower_compute(self, tensor, options, config=None):
        return super().lower_compute(tensor, options, self.config)


def _program(m: int, n: int, k: int):
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    return ops.matmul(a, b, name="C")


def _time(m, n, k, threads, config, a, b) -> float:
    exe = tc.compile(_program(m, n, k), target=_Configured(threads, config))
    out = exe(a, b)
    np.testing.assert_allclose(out, a @ b, rtol=2e-3, atol=2e-2 * np.sqrt(k))
    return median_seconds(lambda: exe(a, b), repeat=7, warmup=1)


def _sweep(m, n, k, threads) -> list[dict[str, int]]:
    contraction = as_contraction(_program(m, n, k))
    memory = X86Avx512Target().spec.memory  # this machine's caches
    base = default_config(contraction, memory.level("L1").size_bytes,
                          memory.level("L2").size_bytes, threads)
    configs = []
    for (mi, nr), kc in itertools.product(tile_candidates(contraction)[:3], (64, 128, 256)):
        config = dict(base, MI=mi, NR=nr, KC=min(kc, k))
        config["MC"] = max(mi, config["MC"] // mi * mi)
        if config not in configs:
            configs.append(config)
    return configs


def _openblas(shapes, threads, coretype: str | None) -> dict[tuple[int, int, int], float]:
    """numpy's matmul timed in a subprocess with ``threads`` OpenBLAS threads (and the kernel
    ``coretype`` forced): both variables are read when OpenBLAS loads."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = "\n".join([
        "import json, sys", "import numpy as np", f"sys.path.insert(0, {here!r})",
        "from common import median_seconds", "out = {}",
        "for m, n, k in json.loads(sys.argv[1]):",
        "    a = np.random.rand(m, k).astype(np.float32)",
        "    b = np.random.rand(k, n).astype(np.float32)",
        "    out[f'{m},{n},{k}'] = median_seconds(lambda: a @ b, repeat=7)",
        "print(json.dumps(out))"])
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    result = subprocess.run([sys.executable, "-c", code, json.dumps(shapes)], env=env,
                            capture_output=True, text=True, check=True)
    raw = json.loads(result.stdout)
    return {tuple(map(int, key.split(","))): value for key, value in raw.items()}


def _option(name: str) -> str | None:
    """The value after ``--name`` on the command line, or None."""
    if name in sys.argv[:-1]:
        return sys.argv[sys.argv.index(name) + 1]
    return None


def main() -> None:
    quick = "--quick" in sys.argv
    shapes = [(256, 256, 256), (1024, 1024, 1024), (512, 3072, 768)] if quick else SQUARE + SKINNY
    if _option("--shapes"):
        shapes = [tuple(int(v) for v in item.split("x"))
                  for item in _option("--shapes").split(",")]
    thread_counts = tuple(int(v) for v in (_option("--threads") or "1,2").split(","))
    rng = np.random.default_rng(0)
    for threads in thread_counts:
        torch = load_torch(threads)
        avx512 = _openblas(shapes, threads, "SkylakeX")
        plain = _openblas(shapes, threads, None)
        rows, vs_blas, vs_torch = [], [], []
        ceiling, _ = measured_ceiling_flops(threads)
        for m, n, k in shapes:
            flop = 2 * m * n * k
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            default = _time(m, n, k, threads, None, a, b)
            tuned = min([default] + [_time(m, n, k, threads, c, a, b)
                                     for c in _sweep(m, n, k, threads)])
            numpy_s = plain[(m, n, k)]
            torch_s = float("nan")
            if torch is not None:
                ta, tb = torch.from_numpy(a), torch.from_numpy(b)
                torch_s = median_seconds(lambda: torch.mm(ta, tb), repeat=7)
            blas = avx512[(m, n, k)]
            vs_blas.append(blas / tuned)
            vs_torch.append(torch_s / tuned)
            rows.append([f"{m}x{n}x{k}", *(f"{flop / s / 1e9:.0f}" for s in
                                            (default, tuned, numpy_s, blas, torch_s)),
                         f"{flop / tuned / ceiling:.0%}",
                         f"{blas / tuned:.2f}", f"{torch_s / tuned:.2f}"])
        rows.append(["geomean", "", "", "", "", "", "", f"{geomean(vs_blas):.2f}",
                     f"{geomean(vs_torch):.2f}"])
        print_table(f"sgemm GFLOP/s, {threads} thread(s); {ceiling_note(threads)}",
                    ["MxNxK", "default", "tuned", "numpy", "openblas-avx512", "torch",
                     "tuned % peak", "tuned/avx512", "tuned/torch"], rows)


if __name__ == "__main__":
    main()
