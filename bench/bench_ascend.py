"""Ascend NPU target (modelled and emulated): for the GEMM chains of thesis Table 3.5 at batch 1
(G10-G12, the Fig. 3.10 setting), the performance model's predicted Ascend 910 time of the
fused Chimera kernel (the intermediate kept on the AI core) and of the TBE-style baseline (two
GEMM kernels, the intermediate written to GM and read back), and their ratio; then a small
chain's emulated run time (the generated AscendC compiled with g++ against the plugin's
emulation header, on this CPU) next to the numpy reference, with its largest difference.

    .venv/bin/python bench/bench_ascend.py [--small]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
from common import median_seconds

import tilecraft as tc
from tilecraft import te
from tilecraft.ops import matmul
from tilecraft.target.registry import get_target

#: name: (M, N, K, L) of thesis Table 3.5 at batch 1: C[M, L] = A[M, K] B[K, L],
#: E[M, N] = C[M, L] D[L, N]
CHAINS = {"G10": (512, 64, 64, 256), "G11": (768, 64, 64, 384), "G12": (1024, 64, 64, 512),
          "G1 (b=1)": (512, 64, 64, 512), "G4 (b=1)": (256, 64, 64, 256),
          "G6 (b=1)": (256, 80, 80, 256)}


def chain_graph(m: int, n: int, k: int, l_: int) -> tc.Graph:
    a = te.placeholder((m, k), name="A", dtype="float16")
    b = te.placeholder((k, l_), name="B", dtype="float16")
    d = te.placeholder((l_, n), name="D", dtype="float16")
    return tc.Graph([matmul(matmul(a, b, name="C"), d, name="E")])


def unfused_kernels(m: int, n: int, k: int, l_: int, target) -> list:
    """The baseline: each GEMM alone through the target's lowering, C through GM."""
    a = te.placeholder((m, k), name="A", dtype="float16")
    b = te.placeholder((k, l_), name="B", dtype="float16")
    c = te.placeholder((m, l_), name="C", dtype="float16")
    d = te.placeholder((l_, n), name="D", dtype="float16")
    first = tc.compile(tc.Graph([matmul(a, b, name="C")]), target=target).kernels
    second = tc.compile(tc.Graph([matmul(c, d, name="E")]), target=target).kernels
    return [*first, *second]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="only G10 and a tiny emulated chain")
    args = parser.parse_args()
    target = get_target("ascend_npu")
    print(f"# ascend_npu model: {target.spec.compute.cores} AI cores at "
          f"{target.spec.compute.frequency_hz / 1e9:g} GHz, GM "
          f"{target.spec.memory.levels[0].bandwidth_bytes_per_cycle} B/cycle; host "
          f"{platform.processor() or platform.machine()}")
    print(f"{'chain':10} {'M N K L':>18} {'fused us':>10} {'bound':>7} {'tiles':>12} "
          f"{'unfused us':>11} {'bound':>7} {'speedup':>8}")
    names = ["G10"] if args.small else list(CHAINS)
    for name in names:
        m, n, k, l_ = CHAINS[name]
        (fused,) = tc.compile(chain_graph(m, n, k, l_), target=target).kernels
        fused_cost = target.estimate(fused)
        baseline = [target.estimate(kernel) for kernel in unfused_kernels(m, n, k, l_, target)]
        base_s = sum(cost.seconds for cost in baseline)
        from tilecraft_ascend_npu.model import STAGES

        def bound(cost) -> str:
            return STAGES[int(cost.detail["bound_stage"])]

        tiles = fused.attrs["schedule"].split(", ")[1].split(" (")[0]
        print(f"{name:10} {f'{m} {n} {k} {l_}':>18} {fused_cost.seconds * 1e6:10.2f} "
              f"{bound(fused_cost):>7} {tiles:>12} {base_s * 1e6:11.2f} "
              f"{'/'.join(bound(c) for c in baseline):>7} {base_s / fused_cost.seconds:7.2f}x")
    m, n, k, l_ = (37, 29, 20, 45) if args.small else (128, 64, 64, 256)
    graph = chain_graph(m, n, k, l_)
    started = time.perf_counter()
    exe = tc.compile(graph, target=target)
    compile_s = time.perf_counter() - started
    rng = np.random.default_rng(0)
    inputs = {"A": rng.standard_normal((m, k)), "B": rng.standard_normal((k, l_)),
              "D": rng.standard_normal((l_, n))}
    inputs = {key: (value * 0.5).astype(np.float16) for key, value in inputs.items()}
    got = exe(**inputs)
    expected = tc.reference.run(graph, **inputs)
    emulated = median_seconds(lambda: exe(**inputs))
    reference = median_seconds(lambda: tc.reference.run(graph, **inputs))
    diff = float(np.abs(got.astype(np.float32) - expected.astype(np.float32)).max())
    print(f"\nemulated fused chain M={m} N={n} K={k} L={l_}: compile {compile_s:.2f} s, run "
          f"{emulated * 1e3:.2f} ms on this CPU (reference {reference * 1e3:.2f} ms); max "
          f"|difference| {diff:g} (|reference| up to {float(np.abs(expected).max()):g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
