"""Row-wise softmax / log_softmax / layer_norm on x86, 1 thread: tilecraft against numpy and
torch, and tilecraft's per-kernel split (how many kernels, the time in each).

    .venv/bin/python bench/bench_softmax_rows.py [--shape 12,512,512] [--repeat 15]

Prints per op the median call time (ms) of each — tilecraft with its row groups
(:mod:`tilecraft.fusion.row_groups`, one kernel) and without (one kernel per compute, the
plugin's row-group step switched off in this process) — and the ratios unfused/tilecraft,
numpy/tilecraft and torch/tilecraft (above 1: tilecraft faster), then the kernels of both.

Run after 531c205 (Intel Xeon family 6 model 167, 1 thread, load 0.8): softmax 1 kernel
1.88 ms against 4 kernels 3.18 ms (torch 2.18 ms), log_softmax 1.67 vs 2.73 ms (torch 2.20),
layer_norm 0.96 vs 2.00 ms (torch 1.53). In BERT-base (bench_networks, full size) the
attention softmax over 12x512x512 went 6.1 -> 3.1 ms and each residual add + layer norm
0.8-1.0 -> 0.4-0.5 ms; the layer's total, ~73 ms, is its GEMMs' and moved within their noise.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import numpy as np


def _median(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@contextlib.contextmanager
def _row_groups_off():
    """The x86 plugin without its row-group step (one kernel per compute, as before)."""
    import tilecraft_x86_avx512.target as plugin

    saved = plugin.fuse_row_groups
    plugin.fuse_row_groups = lambda *args, **kwargs: []
    try:
        yield
    finally:
        plugin.fuse_row_groups = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="12,512,512")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    shape = tuple(int(n) for n in args.shape.split(","))

    from tilecraft_x86_avx512.target import X86Avx512Target

    import tilecraft as tc
    from tilecraft import ops, te

    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32)
    width = shape[-1]
    gamma = rng.standard_normal(width, dtype=np.float32)
    beta = rng.standard_normal(width, dtype=np.float32)

    def np_softmax(a):
        e = np.exp(a - a.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def np_log_softmax(a):
        s = a - a.max(-1, keepdims=True)
        return s - np.log(np.exp(s).sum(-1, keepdims=True))

    def np_layer_norm(a):
        mean = a.mean(-1, keepdims=True)
        var = ((a - mean) ** 2).mean(-1, keepdims=True)
        return (a - mean) / np.sqrt(var + 1e-5) * gamma + beta

    X = te.placeholder(shape, name="x")
    G = te.placeholder((width,), name="gamma")
    B = te.placeholder((width,), name="beta")
    cases = [
        ("softmax", ops.softmax(X, name="y"), (x,), np_softmax,
         None if torch is None else (lambda t: torch.softmax(t, -1))),
        ("log_softmax", ops.log_softmax(X, name="y"), (x,), np_log_softmax,
         None if torch is None else (lambda t: torch.log_softmax(t, -1))),
        ("layer_norm", ops.layer_norm(X, G, B, name="y"), (x, gamma, beta), np_layer_norm,
         None if torch is None else (lambda t: torch.nn.functional.layer_norm(
             t, (width,), torch.from_numpy(gamma), torch.from_numpy(beta)))),
    ]
    print(f"shape {shape}, 1 thread, medians of {args.repeat}")
    print(f"{'op':12s} {'tilecraft':>10s} {'unfused':>9s} {'numpy':>9s} {'torch':>9s} "
          f"{'unf/tc':>7s} {'np/tc':>7s} {'torch/tc':>8s} kernels")
    splits = []
    for name, out, inputs, np_fn, torch_fn in cases:
        exe = tc.compile(out, target=X86Avx512Target(threads=1))
        with _row_groups_off():
            unfused = tc.compile(out, target=X86Avx512Target(threads=1))
        t_unfused = _median(lambda: unfused(*inputs), args.repeat)
        got = exe(*inputs)
        want = np_fn(x)
        err = float(np.max(np.abs(got - want)))
        t_tc = _median(lambda: exe(*inputs), args.repeat)
        t_np = _median(lambda: np_fn(x), args.repeat)
        t_torch = float("nan")
        if torch_fn is not None:
            xt = torch.from_numpy(x)
            t_torch = _median(lambda: torch_fn(xt), args.repeat)
        print(f"{name:12s} {t_tc * 1e3:10.2f} {t_unfused * 1e3:9.2f} {t_np * 1e3:9.2f} "
              f"{t_torch * 1e3:9.2f} {t_unfused / t_tc:7.2f} {t_np / t_tc:7.2f} "
              f"{t_torch / t_tc:8.2f} {len(exe.compiled)} vs {len(unfused.compiled)}"
              f"{'' if err < 1e-3 else f'  MISMATCH {err:.2e}'}")
        for which, e in (("", exe), (" unfused", unfused)):
            splits.append((name + which, [
                (step.report.name, statistics.median(step.report.run_seconds))
                for step in e._steps if step.report.run_seconds]))
    for name, kernels in splits:
        print(f"{name}: " + ", ".join(f"{k} {t * 1e3:.2f} ms" for k, t in kernels))


if __name__ == "__main__":
    main()
