"""The BERT-base feed-forward chain alone (dense 768 -> 3072, GELU, dense 3072 -> 768 on 512
tokens, 4.8 GFLOP) on x86, 1 thread: tilecraft as the planner compiles it, tilecraft forced
fused (one chain kernel: the planner's traffic check, :func:`~tilecraft_x86_avx512.
chain_planning._chain_traffic`, switched off), forced unfused (the two GEMMs on the template,
the GELU alone) and PyTorch eager, in one process, alternating, medians; GFLOP/s and % of the
measured fp32 peak.

    python bench/bench_ffn_chain.py [--repeat N] [--tokens T] [--hidden H] [--ffn F]

Per kernel it prints the median of this run's calls (the pack kernels of the constant weights
run once, when the executable is made). Measured before the traffic check (Intel Xeon family 6
model 167, 2 shared cores, load 1.5-3, two runs; peak as the target's probe measured it, 174
then 190 GFLOP/s): fused 38.1 / 37.1 ms (127 / 130 GFLOP/s), unfused 37.6-38.9 / 39.0 ms (up
GEMM 17.5 / 16.2, GELU 1.7 / 2.0, down GEMM 19.5 / 20.1), torch 33.0 / 33.5 ms (146 / 144
GFLOP/s); later, at load 2-2.5, fused 40.7-43.1 against unfused 35.5-38.1 ms (thread-time
medians, two executables each): fused moves 162 MB from beyond L2 (both 9 MB weights again per
block of 60 rows), unfused 42 MB, and loses when memory is contended. With ``--ffn 384`` (the
weights streamed once: one block of 516 rows) the fused chain reaches 138 GFLOP/s: otherwise
both products run at the template micro-kernels' rate (~140-150 GFLOP/s).
"""

from __future__ import annotations

import argparse

import numpy as np
from common import ceiling_note, load_torch, measured_ceiling_flops, median_seconds, print_table
from tilecraft_x86_avx512 import chain_planning
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te


class _Unfused(X86Avx512Target):
    """The x86 target with every planned chain left apart."""

    def fuse(self, graph, options, plan=None):  # noqa: ANN001, ANN201
        return []


def _program(tokens: int, hidden: int, ffn: int, rng: np.random.Generator):
    x = te.placeholder((tokens, hidden), name="x")
    w1 = te.constant(rng.standard_normal((ffn, hidden)).astype(np.float32) / hidden ** 0.5,
                     name="w1")
    b1 = te.constant(rng.standard_normal(ffn).astype(np.float32) * 0.1, name="b1")
    w2 = te.constant(rng.standard_normal((hidden, ffn)).astype(np.float32) / ffn ** 0.5,
                     name="w2")
    b2 = te.constant(rng.standard_normal(hidden).astype(np.float32) * 0.1, name="b2")
    up = ops.dense(x, w1, bias=b1, name="up")
    act = ops.gelu(up, name="act")
    return ops.dense(act, w2, bias=b2, name="down"), (w1, b1, w2, b2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--ffn", type=int, default=3072)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    out, weights = _program(args.tokens, args.hidden, args.ffn, rng)
    flop = 2 * args.tokens * args.hidden * args.ffn * 2
    planned = tc.compile(out, target=X86Avx512Target(threads=1))
    traffic = chain_planning._chain_traffic
    chain_planning._chain_traffic = lambda chain, mc, room: (0, 1, 0)   # fusing always "pays"
    try:
        fused = tc.compile(out, target=X86Avx512Target(threads=1))
    finally:
        chain_planning._chain_traffic = traffic
    unfused = tc.compile(out, target=_Unfused(threads=1))
    x = rng.standard_normal((args.tokens, args.hidden)).astype(np.float32)
    is_fused = any(k.attrs.get("fused") for k in planned.kernels)
    runs = {"tilecraft planner (" + ("fused" if is_fused else "unfused") + ")":
            lambda: planned(x), "tilecraft forced fused": lambda: fused(x),
            "tilecraft forced unfused": lambda: unfused(x)}
    torch = load_torch(1)
    if torch is not None:
        tx = torch.from_numpy(x)
        w1, b1, w2, b2 = (torch.from_numpy(np.asarray(w.op.value)) for w in weights)

        def run_torch():
            with torch.no_grad():
                h = torch.nn.functional.gelu(torch.nn.functional.linear(tx, w1, b1))
                return torch.nn.functional.linear(h, w2, b2)
        runs["torch eager"] = run_torch
        expected = run_torch().numpy()
        for name, fn in runs.items():
            np.testing.assert_allclose(fn(), expected, rtol=2e-3,
                                       atol=2e-3 * np.abs(expected).max(), err_msg=name)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(3):   # alternate, so load drifts hit every column alike
        for name, fn in runs.items():
            times[name].append(median_seconds(fn, repeat=args.repeat))
    peak = measured_ceiling_flops(1)[0]
    rows = []
    for name, ts in times.items():
        s = float(np.median(ts))
        rows.append([name, f"{s * 1e3:.1f}", f"{flop / s / 1e9:.0f}", f"{flop / s / peak:.0%}"])
    print_table(f"FFN chain {args.tokens}x{args.hidden} -> {args.ffn} -> {args.hidden}, "
                f"{flop / 1e9:.2f} GFLOP, 1 thread; {ceiling_note(1)}",
                ["run", "ms", "GFLOP/s", "% peak"], rows)
    for note in planned.report.notes:
        if "not fused" in note:
            print(note)
    for label, exe in (("fused", fused), ("unfused", unfused)):
        for report in exe.report.kernels:
            if report.run_seconds:   # median of this run's calls, per kernel
                print(f"  {label} {report.name}: {np.median(report.run_seconds) * 1e3:.2f} ms"
                      f"  {report.schedule[:110]}")


if __name__ == "__main__":
    main()
