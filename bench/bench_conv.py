"""Convolutions and the other operator kinds of thesis Table 4.2 vs PyTorch, 1 and 2 threads.

- the 15 conv2d layers of YOLO-v1 (thesis Table 4.3), batch 1: tilecraft with the target's own
  parameters (``default``) and after a quick tuning run (``tuned``: the x86 micro-kernel
  template's space, measured in worker processes), against PyTorch eager (oneDNN);
- GEMV, conv1d, conv3d, depthwise, grouped, dilated and transposed conv2d: default and tuned (the
  template where it applies, FlexTensor's generic schedule space otherwise) against PyTorch.

Prints GFLOP/s and speed-ups with geomeans. ``--quick``: four YOLO layers, one thread, fewer
trials. ``--layers 2,4`` (1-based YOLO layer numbers), ``--threads 1``, ``--trials N`` (0: no
tuning, the default parameters only) and ``--no-others`` measure a subset; ``--others-only``
skips the YOLO layers and ``--only grouped,depthwise`` keeps the other kinds whose name contains
one of the words. Run: ``python bench/bench_conv.py``.
"""

from __future__ import annotations

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
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.reference import run

#: C, K, H(=W), kernel, stride — thesis Table 4.3
YOLO = [(3, 64, 448, 7, 2), (64, 192, 112, 3, 1), (192, 128, 56, 1, 1), (128, 256, 56, 3, 1),
        (256, 256, 56, 1, 1), (256, 512, 56, 3, 1), (512, 256, 28, 1, 1), (256, 512, 28, 3, 1),
        (512, 512, 28, 1, 1), (512, 1024, 28, 3, 1), (1024, 512, 14, 1, 1),
        (512, 1024, 14, 3, 1), (1024, 1024, 14, 3, 1), (1024, 1024, 14, 3, 2),
        (1024, 1024, 7, 3, 1)]


def _yolo(c, k, h, kernel, stride):
    x = te.placeholder((1, c, h, h), name="x")
    w = te.placeholder((k, c, kernel, kernel), name="w")
    y = ops.conv2d(x, w, stride=stride, padding=kernel // 2, name="y")

    def torch_fn(torch, tx, tw):
        return lambda: torch.nn.functional.conv2d(tx, tw, stride=stride, padding=kernel // 2)
    return y, torch_fn


def _others():
    """name -> (program, inputs shapes, torch function builder)."""
    cases = {}
    A = te.placeholder((2048, 2048), name="A")
    v = te.placeholder((2048,), name="v")
    cases["gemv 2048"] = (ops.gemv(A, v, name="y"),
                          lambda torch, a, b: (lambda: torch.mv(a, b)))
    x1 = te.placeholder((1, 64, 1024), name="x")
    w1 = te.placeholder((128, 64, 3), name="w")
    cases["conv1d 64->128 L1024"] = (ops.conv1d(x1, w1, padding=1, name="y"),
                                     lambda torch, a, b: (lambda: torch.nn.functional.conv1d(
                                         a, b, padding=1)))
    x3 = te.placeholder((1, 32, 16, 28, 28), name="x")
    w3 = te.placeholder((64, 32, 3, 3, 3), name="w")
    cases["conv3d 32->64 16x28x28"] = (ops.conv3d(x3, w3, padding=1, name="y"),
                                       lambda torch, a, b: (lambda: torch.nn.functional.conv3d(
                                           a, b, padding=1)))
    xd = te.placeholder((1, 128, 56, 56), name="x")
    wd = te.placeholder((128, 1, 3, 3), name="w")
    cases["depthwise 128 @56"] = (ops.depthwise_conv2d(xd, wd, padding=1, name="y"),
                                  lambda torch, a, b: (lambda: torch.nn.functional.conv2d(
                                      a, b, padding=1, groups=128)))
    xg = te.placeholder((1, 128, 28, 28), name="x")
    wg = te.placeholder((256, 32, 3, 3), name="w")
    cases["grouped g=4 128->256 @28"] = (ops.conv2d(xg, wg, padding=1, groups=4, name="y"),
                                         lambda torch, a, b: (lambda: torch.nn.functional.conv2d(
                                             a, b, padding=1, groups=4)))
    xl = te.placeholder((1, 128, 28, 28), name="x")
    wl = te.placeholder((128, 128, 3, 3), name="w")
    cases["dilated d=2 128 @28"] = (ops.conv2d(xl, wl, padding=2, dilation=2, name="y"),
                                    lambda torch, a, b: (lambda: torch.nn.functional.conv2d(
                                        a, b, padding=2, dilation=2)))
    xt = te.placeholder((1, 128, 14, 14), name="x")
    wt = te.placeholder((128, 64, 4, 4), name="w")
    cases["transposed s=2 128->64 @14"] = (
        ops.conv_transpose2d(xt, wt, stride=2, padding=1, name="y"),
        lambda torch, a, b: (lambda: torch.nn.functional.conv_transpose2d(a, b, stride=2,
                                                                           padding=1)))
    return cases


def _measure(program, threads, trials, torch, torch_builder, rng):
    graph = tc.Graph.from_outputs([program])
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    target = X86Avx512Target(threads=threads)
    default = tc.compile(graph, target=target)
    expected = run(graph, inputs)
    np.testing.assert_allclose(default(**inputs), expected, rtol=1e-3,
                               atol=1e-3 * float(np.abs(expected).max()))
    default_s = median_seconds(lambda: default(**inputs), repeat=5)
    tuned_s = default_s
    if trials:
        tuned = tc.compile(graph, target=target,
                           tuning={"preset": "quick", "trials": trials, "progress": False})
        np.testing.assert_allclose(tuned(**inputs), expected, rtol=1e-3,
                                   atol=1e-3 * float(np.abs(expected).max()))
        tuned_s = min(default_s, median_seconds(lambda: tuned(**inputs), repeat=5))
    torch_s = float("nan")
    if torch is not None:
        args = [torch.from_numpy(inputs[t.name]) for t in graph.inputs]
        torch_s = median_seconds(torch_builder(torch, *args), repeat=5)
    from tilecraft.passes.transposed_conv import as_transposed_conv
    from tilecraft.tuning.workload import flop_count

    transposed = as_transposed_conv(program)  # count the real products, not the gather form's
    flops = transposed.flops if transposed is not None else flop_count(graph)
    return flops, default_s, tuned_s, torch_s


def _option(name: str) -> str | None:
    """The value after ``--name`` on the command line, or None."""
    if name in sys.argv[:-1]:
        return sys.argv[sys.argv.index(name) + 1]
    return None


def main() -> None:
    quick = "--quick" in sys.argv
    layers = [1, 2, 4, 6] if quick else range(len(YOLO))
    if _option("--layers"):
        layers = [int(v) - 1 for v in _option("--layers").split(",")]
    if "--others-only" in sys.argv:
        layers = []
    wanted = (_option("--only") or "").split(",")
    trials = 6 if quick else 16
    if _option("--trials") is not None:
        trials = int(_option("--trials"))
    thread_counts = (1,) if quick else (1, 2)
    if _option("--threads"):
        thread_counts = tuple(int(v) for v in _option("--threads").split(","))
    others = not (quick or "--no-others" in sys.argv)
    rng = np.random.default_rng(0)
    for threads in thread_counts:
        torch = load_torch(threads)
        rows, ratios, one_by_one = [], [], []
        for index in layers:
            program, torch_fn = _yolo(*YOLO[index])
            flop, default_s, tuned_s, torch_s = _measure(program, threads, trials, torch,
                                                          torch_fn, rng)
            ratio = torch_s / tuned_s
            ratios.append(ratio)
            if YOLO[index][3] == 1:
                one_by_one.append(ratio)
            rows.append([f"C{index + 1}", "x".join(map(str, YOLO[index])),
                         *(f"{flop / s / 1e9:.0f}" for s in (default_s, tuned_s, torch_s)),
                         f"{flop / tuned_s / measured_ceiling_flops(threads)[0]:.0%}",
                         f"{ratio:.2f}"])
        if layers:
            rows.append(["geomean", "", "", "", "", "", f"{geomean(ratios):.2f}"])
            rows.append(["1x1 only", "", "", "", "", "", f"{geomean(one_by_one):.2f}"])
            print_table(f"YOLO-v1 conv2d (C,K,H,k,s), batch 1, GFLOP/s, {threads} thread(s); "
                        f"{ceiling_note(threads)}",
                        ["layer", "shape", "default", "tuned", "torch", "tuned % peak",
                         "tuned/torch"], rows)
        if not others:
            continue
        rows = []
        for name, (program, torch_fn) in _others().items():
            if not any(word in name for word in wanted):
                continue
            flop, default_s, tuned_s, torch_s = _measure(program, threads, trials, torch,
                                                          torch_fn, rng)
            rows.append([name, *(f"{flop / s / 1e9:.1f}" for s in (default_s, tuned_s, torch_s)),
                         f"{torch_s / tuned_s:.2f}"])
        print_table(f"other operator kinds (thesis Table 4.2), GFLOP/s, {threads} thread(s)",
                    ["operator", "default", "tuned", "torch", "tuned/torch"], rows)


if __name__ == "__main__":
    main()
