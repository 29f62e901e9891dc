"""Fused convolution chains (thesis Table 3.6, C1-C8, ReLU between) vs PyTorch, 1 and 2 threads.

Each chain is ``conv2d(relu(conv2d(x, w1, stride s1)), w2, stride s2)``, batch 1, NCHW, "same"
padding. tilecraft compiles it twice: as is (the planner fuses conv -> relu -> 1x1 conv into
one kernel, :mod:`tilecraft_x86_avx512.blocking.column_chain`) and with the intermediate made a
graph output, which keeps every compute in its own kernels (``unfused``: the same micro-kernel
template, no fusion). PyTorch eager runs ``conv2d``/``relu``/``conv2d`` (oneDNN). numpy has no
convolution and is left out. Prints GFLOP/s, the ratios and their geomeans, and which chains the
planner fused (C6's second convolution is 3x3: not fused, the report says why).

Run: ``python bench/bench_conv_chains.py`` (``--quick``: C3, C7; ``--threads 1``; ``--chains
C1,C4``).
"""

from __future__ import annotations

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

#: name: (IC, H, W, OC1, OC2, stride1, stride2, k1, k2) — thesis Table 3.6
CHAINS = {
    "C1": (64, 112, 112, 192, 128, 2, 1, 3, 1), "C2": (32, 147, 147, 64, 80, 2, 1, 3, 1),
    "C3": (64, 56, 56, 128, 64, 1, 1, 3, 1), "C4": (128, 28, 28, 256, 128, 1, 1, 3, 1),
    "C5": (16, 227, 227, 64, 16, 4, 1, 3, 1), "C6": (64, 56, 56, 64, 64, 1, 1, 1, 3),
    "C7": (64, 56, 56, 64, 64, 1, 1, 1, 1), "C8": (256, 56, 56, 256, 64, 1, 1, 1, 1),
}


def conv_chain_program(ic, h, w, oc1, oc2, s1, s2, k1, k2):
    """The chain's output and its ReLU intermediate."""
    x = te.placeholder((1, ic, h, w), name="x")
    w1 = te.placeholder((oc1, ic, k1, k1), name="w1")
    w2 = te.placeholder((oc2, oc1, k2, k2), name="w2")
    act = ops.relu(ops.conv2d(x, w1, stride=s1, padding=k1 // 2, name="conv1"), name="act")
    return ops.conv2d(act, w2, stride=s2, padding=k2 // 2, name="conv2"), act


def _flops(out, act, shape) -> int:
    ic, _, _, oc1, oc2, _, _, k1, k2 = shape
    return 2 * (int(np.prod(act.shape)) * ic * k1 * k1 + int(np.prod(out.shape)) * oc1 * k2 * k2)


def _arg(flag: str, default: str) -> str:
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default


def main() -> None:
    names = ["C3", "C7"] if "--quick" in sys.argv else _arg("--chains", ",".join(CHAINS)).split(",")
    thread_counts = [int(t) for t in _arg("--threads", "1,2").split(",")]
    rng = np.random.default_rng(0)
    for threads in thread_counts:
        torch = load_torch(threads)
        rows, vs_torch, vs_unfused = [], [], []
        for name in names:
            shape = CHAINS[name]
            out, act = conv_chain_program(*shape)
            target = X86Avx512Target(threads=threads)
            start = time.perf_counter()
            fused = tc.compile(tc.Graph.from_outputs([out]), target=target)
            compile_s = time.perf_counter() - start
            unfused = tc.compile(tc.Graph.from_outputs([out, act]), target=target)
            is_fused = any(k.attrs.get("fused") for k in fused.kernels)
            x = rng.standard_normal((1, *shape[:3])).astype(np.float32)
            w1 = (rng.standard_normal((shape[3], shape[0], shape[7], shape[7])) * 0.1
                  ).astype(np.float32)
            w2 = (rng.standard_normal((shape[4], shape[3], shape[8], shape[8])) * 0.1
                  ).astype(np.float32)
            ours = median_seconds(lambda: fused(x, w1, w2), repeat=9)
            ours_unfused = median_seconds(lambda: unfused(x, w1, w2), repeat=9)
            torch_s = float("nan")
            if torch is not None:
                tx, tw1, tw2 = map(torch.from_numpy, (x, w1, w2))
                conv = torch.nn.functional.conv2d
                s1, s2, k1, k2 = shape[5:]

                def run_torch():
                    return conv(torch.relu(conv(tx, tw1, stride=s1, padding=k1 // 2)), tw2,
                                stride=s2, padding=k2 // 2)
                expected = run_torch().numpy()
                np.testing.assert_allclose(fused(x, w1, w2), expected, rtol=1e-3,
                                           atol=1e-3 * np.abs(expected).max())
                torch_s = median_seconds(run_torch, repeat=9)
            flop = _flops(out, act, shape)
            vs_torch.append(torch_s / ours)
            vs_unfused.append(ours_unfused / ours)
            rows.append([name, "yes" if is_fused else "no",
                         *(f"{flop / s / 1e9:.0f}" for s in (ours, ours_unfused, torch_s)),
                         f"{flop / ours / measured_ceiling_flops(threads)[0]:.0%}",
                         f"{torch_s / ours:.2f}", f"{ours_unfused / ours:.2f}",
                         f"{compile_s:.2f}"])
        rows.append(["geomean", "", "", "", "", "", f"{geomean(vs_torch):.2f}",
                     f"{geomean(vs_unfused):.2f}", ""])
        print_table(f"conv chains with relu (Table 3.6), GFLOP/s, {threads} thread(s); "
                    f"{ceiling_note(threads)}",
                    ["chain", "fused", "tilecraft", "unfused", "torch", "% peak", "vs torch",
                     "vs unfused", "compile s"], rows)


if __name__ == "__main__":
    main()
