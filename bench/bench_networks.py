"""Whole networks (tilecraft.models) on this x86: per network the compile time (no tuning), the
tilecraft x86 run time and onnxruntime's (CPU, ``--threads`` intra-op threads) on the same
ONNX export, medians measured side by side in one run, and whether the outputs match
(rtol = atol = 1e-3).

    python bench/bench_networks.py [--small] [--threads N] [NAME ...]

The small configurations take seconds; the full sizes (batch 1, sequence 512, 224^2) minutes.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import geomean, median_seconds, print_table  # noqa: E402

import tilecraft as tc  # noqa: E402
import tilecraft.models as models  # noqa: E402


def measure(name: str, small: bool, threads: int) -> list[str]:
    import onnxruntime as ort

    graph = models.build(name, small=small)
    model = models.to_onnx(name, small=small)
    x = np.random.default_rng(1).standard_normal(graph.inputs[0].shape).astype(np.float32)
    started = time.perf_counter()
    exe = tc.compile(graph, target="x86_avx512")
    compile_s = time.perf_counter() - started
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    matches = np.allclose(exe(x), expected, rtol=1e-3, atol=1e-3)
    ours = median_seconds(lambda: exe(x), repeat=7, min_seconds=0.5)
    theirs = median_seconds(lambda: session.run(None, {"x": x}), repeat=7, min_seconds=0.5)
    return [name, f"{compile_s:.1f}", f"{ours * 1e3:.2f}", f"{theirs * 1e3:.2f}",
            f"{theirs / ours:.2f}", "yes" if matches else "NO"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="networks (default all)")
    parser.add_argument("--small", action="store_true", help="the small test configurations")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    args = parser.parse_intermixed_args(argv)
    names = args.names or list(models.NETWORKS)
    rows = [measure(name, args.small, args.threads) for name in names]
    cpu = platform.processor() or platform.machine()
    print_table(f"networks ({'small' if args.small else 'full size'}), {cpu}, "
                f"onnxruntime {args.threads} thread(s)",
                ["network", "compile s", "tilecraft ms", "onnxruntime ms", "speed-up", "match"],
                rows)
    print(f"geomean speed-up over onnxruntime: {geomean([float(r[4]) for r in rows]):.2f}")
    return 0 if all(r[5] == "yes" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
