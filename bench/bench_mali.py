"""Mali target end to end: compile time, run time of the generated OpenCL C on this machine's
OpenCL device (PoCL's CPU device: a stand-in for a Mali GPU, no speed target) next to numpy in
the same run, and the roofline model's predicted Mali-G76 MP10 time, for GEMM, conv2d
(ResNet-18 layers), depthwise conv and int8 GEMM through arm_dot.

    .venv/bin/python bench/bench_mali.py [--small]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
from common import median_seconds

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.graph import Graph
from tilecraft.reference.interpreter import run as run_reference
from tilecraft.target.registry import get_target


def cases(small: bool) -> list[tuple[str, te.Tensor, dict | None]]:
    s = 4 if small else 1
    gemm = 512 // s
    A, B = te.placeholder((gemm, gemm), name="A"), te.placeholder((gemm, gemm), name="B")
    result = [(f"gemm {gemm}^3 fp32", ops.matmul(A, B, name="C"), None)]
    for name, c, k, hw, r in [("resnet18 conv3_x", 128, 128, 28, 3),
                              ("resnet18 conv4_x", 256, 256, 14, 3)]:
        c, k, hw = c // s, k // s, hw
        x = te.placeholder((1, c, hw, hw), name="x")
        w = te.placeholder((k, c, r, r), name="w")
        result.append((f"{name} {c}->{k} {hw}x{hw}", ops.conv2d(x, w, padding=1, name="y"),
                       None))
    c = 256 // s
    x8 = te.placeholder((1, c, 14, 14), "int8", name="x")
    w8 = te.placeholder((c, 1, 3, 3), "int8", name="w")
    result.append((f"depthwise 3x3 int8 {c}ch 14x14",
                   ops.conv2d(x8, w8, padding=1, groups=c, out_dtype="int32", name="dw"),
                   {"dw": "arm_dot_acc"}))
    n = 512 // s
    A8, B8 = te.placeholder((n, n), "int8", name="A"), te.placeholder((n, n), "int8", name="B")
    result.append((f"gemm {n}^3 int8 arm_dot",
                   ops.matmul(A8, B8, out_dtype="int32", name="C"), {"C": "arm_dot_acc"}))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="quarter sizes (a smoke run)")
    args = parser.parse_args()
    target = get_target("mali")
    print(f"device: {target.available().reasons.get('execute', 'a Mali GPU')}")
    print(f"host: {platform.processor() or platform.machine()}")
    print(f"{'case':36} {'compile s':>9} {'PoCL ms':>9} {'numpy ms':>9} "
          f"{'model Mali ms':>13} {'bound':>7} exact")
    for name, output, tensorize in cases(args.small):
        graph = Graph.from_outputs([output])
        start = time.perf_counter()
        executable = tc.compile(graph, target="mali", tensorize=tensorize)
        compile_s = time.perf_counter() - start
        rng = np.random.default_rng(0)
        inputs = {t.name: (rng.integers(-128, 128, t.shape).astype(np.int8)
                           if t.dtype.value == "int8" else
                           rng.standard_normal(t.shape).astype(np.float32))
                  for t in graph.inputs}
        result = executable(**inputs)
        expected = run_reference(graph, inputs)
        ok = np.array_equal(result, expected) if result.dtype == np.int32 else \
            bool(np.allclose(result, expected, rtol=1e-3, atol=1e-3))
        pocl = median_seconds(lambda: executable(**inputs), repeat=5, warmup=1)
        numpy_s = median_seconds(lambda: run_reference(graph, inputs), repeat=5, warmup=1)
        estimates = [target.estimate(kernel) for kernel in executable.kernels]
        model = sum(e.seconds for e in estimates)
        bound = "compute" if estimates[-1].detail["compute_bound"] else "memory"
        print(f"{name:36} {compile_s:9.2f} {pocl * 1e3:9.2f} {numpy_s * 1e3:9.2f} "
              f"{model * 1e3:13.3f} {bound:>7} {ok}", flush=True)
    print("PoCL times are a CPU stand-in's, not a Mali's; the model column is the roofline "
          "estimate on the spec's Mali-G76 MP10 (numpy: the reference interpreter)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
