"""Convolution gradients derived by tilecraft.autodiff (issue 18), compiled for x86 with the
default schedules (no tuning), against PyTorch autograd on the same shapes: per ResNet-18
conv layer the data and weight gradients (one program), medians measured side by side in one
run, the ratio torch / tilecraft (> 1: tilecraft faster) and its geomean, and whether the
results match (rtol = atol = 1e-3 relative to the largest value).

    python bench/bench_autodiff.py [--small] [--threads N ...]

``--threads`` sets PyTorch's intra-op threads (1 and 2 by default); tilecraft's kernels use
the x86 target's own parallel split. ``--small`` halves the image sizes.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import geomean, load_torch, median_seconds, print_table  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft import ops, te  # noqa: E402
from tilecraft.autodiff import grad  # noqa: E402
from tilecraft.graph import Graph  # noqa: E402

#: (name, in channels, image size, out channels, kernel, stride, padding): ResNet-18's convs
LAYERS = [
    ("conv1 7x7/2", 3, 224, 64, 7, 2, 3),
    ("layer1 3x3", 64, 56, 64, 3, 1, 1),
    ("layer2 3x3/2", 64, 56, 128, 3, 2, 1),
    ("layer2 1x1/2", 64, 56, 128, 1, 2, 0),
    ("layer3 3x3", 256, 14, 256, 3, 1, 1),
    ("layer4 3x3/2", 256, 14, 512, 3, 2, 1),
]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    rows = []
    ratios: dict[int, list[float]] = {t: [] for t in args.threads}
    for name, cin, size, cout, kernel, stride, padding in LAYERS:
        size = max(kernel, size // 2) if args.small else size
        x = te.placeholder((1, cin, size, size), name="x")
        w = te.placeholder((cout, cin, kernel, kernel), name="w")
        out = ops.conv2d(x, w, stride=stride, padding=padding, name="out")
        program = Graph.from_outputs(grad(out, [x, w]))
        rng = np.random.default_rng(0)
        arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32)
                  for t in program.inputs}
        started = time.perf_counter()
        exe = tc.compile(program, target="x86_avx512")
        compile_s = time.perf_counter() - started
        ours_s = median_seconds(lambda: exe(**arrays))
        dx, dw = exe(**arrays)
        row = [name, f"{size}x{size}", f"{compile_s:.1f}s", f"{ours_s * 1e3:.2f}"]
        for threads in args.threads:
            torch = load_torch(threads)
            if torch is None:
                row += ["-", "-"]
                continue
            xt = torch.tensor(arrays["x"], requires_grad=True)
            wt = torch.tensor(arrays["w"], requires_grad=True)
            result = torch.nn.functional.conv2d(xt, wt, stride=stride, padding=padding)
            g = torch.tensor(arrays["grad_out"])
            theirs_s = median_seconds(lambda: torch.autograd.grad(  # noqa: B023
                result, [xt, wt], g, retain_graph=True))  # noqa: B023
            tdx, tdw = torch.autograd.grad(result, [xt, wt], g, retain_graph=True)
            same = all(np.allclose(a, b.numpy(), rtol=1e-3, atol=1e-3 * np.abs(a).max())
                       for a, b in ((dx, tdx), (dw, tdw)))
            ratios[threads].append(theirs_s / ours_s)
            row += [f"{theirs_s * 1e3:.2f}", f"{theirs_s / ours_s:.2f}x{'' if same else ' !='}"]
        rows.append(row)
    header = ["layer", "image", "compile", "tilecraft ms"]
    for threads in args.threads:
        header += [f"torch {threads}t ms", f"ratio {threads}t"]
    print_table(f"conv2d data+weight gradients, batch 1 ({cpu_name()})",
                header, rows)
    for threads, values in ratios.items():
        print(f"geomean torch/tilecraft, torch {threads} thread(s): {geomean(values):.2f}x")


if __name__ == "__main__":
    main()
