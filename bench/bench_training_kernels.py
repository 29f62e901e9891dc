"""The small CNN training step's kernels on x86, each path against what it replaced, side by
side in one process (alternating calls, medians), 1 thread:

1. the whole step with intermediates kept between calls vs allocated fresh every call, and the
   time a call spends outside its kernels;
2. a batched convolution (batch 32) on the micro-kernel template vs the default loop nest;
3. a strided convolution's data gradient: its col2im gather phase by phase vs the loop nest.

    python bench/bench_training_kernels.py [--repeat N]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TILECRAFT_X86_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from bench_autodiff import cpu_name  # noqa: E402
from common import print_table  # noqa: E402
from tilecraft_x86_avx512.target import X86Avx512Target  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft import ops, te  # noqa: E402
from tilecraft.autodiff import grad, sgd_step  # noqa: E402
from tilecraft.autodiff.examples import small_cnn  # noqa: E402
from tilecraft.graph import Graph  # noqa: E402
from tilecraft.passes.col2im_gather import as_col2im_gather  # noqa: E402

RNG = np.random.default_rng(0)


class LoopNests(X86Avx512Target):
    """The x86 target with the core's default loop nest for the computes ``pick`` selects."""

    def __init__(self, pick):
        super().__init__(threads=1)
        self.pick = pick

    def lower_compute(self, tensor, options, config=None):
        return None if self.pick(tensor) else super().lower_compute(tensor, options, config)


def alternate(calls: dict, repeat: int) -> dict[str, float]:
    """Median seconds per labelled call, the calls alternating."""
    times: dict[str, list[float]] = {label: [] for label in calls}
    for _ in range(repeat):
        for label, call in calls.items():
            start = time.perf_counter()
            call()
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(values) for label, values in times.items()}


def inputs_of(graph: Graph) -> dict[str, np.ndarray]:
    return {t.name: RNG.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}


def bench_batched_conv(repeat: int) -> list[str]:
    x = te.placeholder((32, 32, 32, 32), name="x")
    w = te.placeholder((64, 32, 3, 3), name="w")
    graph = Graph.from_outputs([ops.conv2d(x, w, stride=2, padding=1, name="y")])
    arrays = inputs_of(graph)
    new = tc.compile(graph, X86Avx512Target(threads=1))
    old = tc.compile(graph, LoopNests(lambda t: t.name == "y"))
    same = np.allclose(new(**arrays), old(**arrays), rtol=1e-4, atol=1e-3)
    t = alternate({"old": lambda: old(**arrays), "new": lambda: new(**arrays)}, max(3, repeat // 3))
    return ["conv2d 32->64 3x3/2, batch 32, 32x32", f"{t['old'] * 1e3:.2f}",
            f"{t['new'] * 1e3:.3f}", f"{t['old'] / t['new']:.1f}", "yes" if same else "NO"]


def bench_col2im(repeat: int) -> list[list[str]]:
    rows = []
    for x_shape, w_shape, label in [((32, 32, 32, 32), (64, 32, 3, 3), "3x3/2 b32 (small CNN)"),
                                    ((1, 3, 224, 224), (64, 3, 7, 7), "7x7/2 b1 (ResNet conv1)")]:
        x = te.placeholder(x_shape, name="x")
        padding = w_shape[-1] // 2
        y = ops.conv2d(x, te.placeholder(w_shape, name="w"), stride=2, padding=padding, name="y")
        graph = Graph.from_outputs(grad(y, [x]))
        arrays = inputs_of(graph)
        new = tc.compile(graph, X86Avx512Target(threads=1))
        old = tc.compile(graph, LoopNests(lambda t: as_col2im_gather(t) is not None))
        same = np.allclose(new(**arrays), old(**arrays), rtol=1e-4, atol=1e-3)
        name = next(c.name for c in graph.computes if as_col2im_gather(c) is not None)
        for exe in (old, new):
            exe.report.kernel(name).run_seconds.clear()
        alternate({"old": lambda: old(**arrays), "new": lambda: new(**arrays)}, repeat)
        o, n = (statistics.median(e.report.kernel(name).run_seconds) for e in (old, new))
        rows.append([f"col2im gather of dX, {label}", f"{o * 1e3:.3f}", f"{n * 1e3:.3f}",
                     f"{o / n:.2f}", "yes" if same else "NO"])
    return rows


def bench_step(repeat: int) -> list[list[str]]:
    model = small_cnn(batch=32, image=32, channels=(3, 32, 64), classes=10)
    step = sgd_step(model.graph, model.loss, model.params, lr=0.05)
    arrays = {**model.init(0), **model.batch(0)}
    kept = tc.compile(step.graph, X86Avx512Target(threads=1))
    fresh = copy.copy(kept)  # the same kernels, intermediates allocated every call
    plan = kept._plan
    steps = []
    for item in plan.steps:
        moved = tuple(w for w in item.workspaces if w[0] in kept._outputs_by_name)
        steps.append(dataclasses.replace(item, allocations=item.allocations + moved,
                                          workspaces=tuple(w for w in item.workspaces
                                                           if w not in moved)))
    fresh._plan = dataclasses.replace(plan, steps=tuple(steps), idle_workspaces=[])
    same = all(np.array_equal(a, b) for a, b in zip(kept(**arrays), fresh(**arrays)))
    reports = [k for k in kept.report.kernels]
    for k in reports:
        k.run_seconds.clear()
    walls, gaps = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        kept(**arrays)
        walls.append(time.perf_counter() - start)
        gaps.append(walls[-1] - sum(k.run_seconds[-1] for k in reports if k.run_seconds))
    t = alternate({"fresh": lambda: fresh(**arrays), "kept": lambda: kept(**arrays)}, repeat)
    count = sum(1 for k in reports if k.run_seconds)
    return [["small CNN step, intermediates fresh -> kept", f"{t['fresh'] * 1e3:.2f}",
             f"{t['kept'] * 1e3:.2f}", f"{t['fresh'] / t['kept']:.2f}", "yes" if same else "NO"],
            [f"  of which outside its {count} kernels", "", f"{statistics.median(gaps) * 1e3:.3f}",
             f"{statistics.median(gaps) / count * 1e6:.1f} us/kernel", ""]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    print(f"# {cpu_name()}, {os.cpu_count()} cores, 1 thread, load average "
          f"{os.getloadavg()[0]:.1f} at the start")
    # the step first: how fresh intermediates cost depends on malloc's state (the earlier
    # parts' large frees raise glibc's mmap threshold, after which freed blocks are reused)
    rows = [*bench_step(args.repeat), bench_batched_conv(args.repeat), *bench_col2im(args.repeat)]
    print_table("small CNN training kernels: what each path replaced (old) vs now (new), ms",
                ["kernel", "old ms", "new ms", "old/new", "match"], rows)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
