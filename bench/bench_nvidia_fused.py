"""Fused chains on the NVIDIA target (thesis Table 3.5, G1-G12, Fig. 3.9): per chain, plain
(``E = (A @ B) @ D``) and with softmax (``E = softmax(A @ B / sqrt(K)) @ D``), float16, on the
A100 (``nvidia_tc``) and H100 (``nvidia_tc:h100``) specs: compile time of the fused kernel
(fusion planning + Chimera's tiles + CUDA C + NVRTC for sm_80 and sm_90), its registers /
shared memory / occupancy from the build, and the model's predicted time and bound, next to
the predicted time of the same graph compiled unfused (the fusion stage skipped: each GEMM
through its WMMA mapping, softmax as its five memory-bound kernels, ``ops.scale`` one more).

Where a GPU is available (the plugin's launch path finds a driver) it builds only for that
GPU's spec (sm_90: ``nvidia_tc:h100``, else the A100 one) and measures, in the same run, the
fused kernel (median of 20 CUDA-event timings; its output checked against eager's on the same
random operands) next to PyTorch (torch is imported only there):
eager bmm [+ scale + softmax] + bmm, and for the softmax chains (fused attention)
``F.scaled_dot_product_attention`` on the same float16 operands; the columns ``x eager`` and
``x sdpa`` are PyTorch's time over the fused kernel's (above 1: the fused kernel is faster),
with their geomeans at the end. One H100 run: ``bench/data/nvidia_h100_2026-11-28.txt``
(after ``bench_nvidia.py``'s table).

On an H100 machine, one command, a few minutes (24 NVRTC builds, one per chain and variant,
then the timings; ``--small``: G1 and G10 only, under a minute)::

    .venv/bin/python bench/bench_nvidia_fused.py

Here (no GPU) it prints the predicted table for both specs; ``--small`` keeps that to ~1.5
minutes on the shared 2-core box (also printed by ``bench/bench_nvidia.py`` after its table).
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.pipeline import default_stages, run_pipeline
from tilecraft.target.registry import get_target

TARGETS = (("A100", "nvidia_tc"), ("H100", "nvidia_tc:h100"))
#: name: (batch, M, N, K, L), thesis Table 3.5 (the order of bench_nvidia.CHAINS)
CHAINS = {
    "G1": (8, 512, 64, 64, 512), "G2": (12, 512, 64, 64, 512), "G3": (16, 512, 64, 64, 512),
    "G4": (12, 256, 64, 64, 256), "G5": (16, 256, 64, 64, 256), "G6": (16, 256, 80, 80, 256),
    "G7": (12, 208, 64, 64, 208), "G8": (16, 208, 64, 64, 208), "G9": (16, 208, 80, 80, 208),
    "G10": (1, 512, 64, 64, 256), "G11": (1, 768, 64, 64, 384), "G12": (1, 1024, 64, 64, 512),
}
_LOWERING = ("graph_passes", "fusion", "mapping", "schedule", "kernel_ir")


def chain_graph(batch: int, m: int, n: int, k: int, l_: int, softmax: bool) -> tc.Graph:
    A = te.placeholder((batch, m, k), "float16", name="A")
    B = te.placeholder((batch, k, l_), "float16", name="B")
    D = te.placeholder((batch, l_, n), "float16", name="D")
    T = ops.batch_matmul(A, B, name="T")
    S = ops.softmax(ops.scale(T, 1.0 / math.sqrt(k), name="Ts"), name="S") if softmax else T
    return tc.Graph.from_outputs([ops.batch_matmul(S, D, name="E")])


def lowered_kernels(graph: tc.Graph, target, fused: bool) -> list:
    """The Kernel IR of ``graph`` for ``target``: with the fusion stage, or without it."""
    stages = [s for s in default_stages() if s.name in _LOWERING
              and (fused or s.name != "fusion")]
    return run_pipeline(graph, target, stages=stages).kernels


def _operands(kernel) -> dict:
    """Random float16 operands A, B, D (scaled so softmax rows are not one-hot) and E."""
    import numpy as np

    rng = np.random.default_rng(0)
    return {b.name: (rng.standard_normal(b.shape) * 0.1).astype(b.dtype.numpy)
            for b in kernel.params}


def _measure(artifact, arrays: dict, repeat: int = 20) -> float:
    """The fused kernel's median seconds over ``repeat`` launches; ``arrays['E']`` gets its
    output (the first launch's)."""
    from tilecraft_nvidia_tc.launch import make_launcher, parameters_from_meta

    launcher = make_launcher(artifact.handle, parameters_from_meta(artifact.meta))
    return statistics.median(launcher.run(arrays, repeat=repeat))


def _device_architecture() -> str:
    """``sm_XY`` of device 0 (the driver's, else torch's)."""
    try:
        from tilecraft_nvidia_tc.launch.driver import Device, load_driver

        return Device(load_driver()).architecture
    except Exception:  # the pycuda launch path: ask torch
        import torch

        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"


def _torch_seconds(arrays: dict, softmax: bool) -> tuple[float, float | None, float] | None:
    """PyTorch eager's time for the chain on the same operands (and SDPA's with softmax), and
    the largest difference of the fused kernel's E from eager's; None without torch + CUDA."""
    try:
        import torch
        import torch.nn.functional as functional
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    a, b, d = (torch.from_numpy(arrays[name]).cuda() for name in ("A", "B", "D"))
    k = a.shape[-1]
    key = b.transpose(1, 2).contiguous()

    def eager():
        t = torch.bmm(a, b)
        return torch.bmm(torch.softmax(t / math.sqrt(k), dim=-1) if softmax else t, d)

    def timed(run) -> float:
        run()
        times = []
        for _ in range(20):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            stop.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(stop) / 1e3)
        return statistics.median(times)

    expected = eager().float().cpu().numpy()
    error = float(abs(arrays["E"].astype("float32") - expected).max())
    # SDPA's default scale is 1 / sqrt(K), the chain's; value's width N may differ from K
    sdpa = timed(lambda: functional.scaled_dot_product_attention(a, key, d)) \
        if softmax else None
    return timed(eager), sdpa, error


def main(small: bool = False) -> int:
    from tilecraft_nvidia_tc.launch import launch_status

    usable, why = launch_status()
    targets = [(label, get_target(name)) for label, name in TARGETS]
    if usable:   # build and predict for the GPU at hand only
        here = "H100" if _device_architecture() == "sm_90" else "A100"
        targets = [(label, target) for label, target in targets if label == here]
    print(f"fused chains (thesis Table 3.5) — host: {platform.processor() or platform.machine()};"
          f" GPU: {why if usable else 'none (' + why + ')'}")
    header = f"{'chain':14} {'GFLOP':>6}"
    for label, _ in targets:
        header += (f" | {label} {'comp s':>6} {'regs':>4} {'smem KB':>7} {'occ':>4} "
                   f"{'fused us':>8} {'bound':>11} {'unfused us':>10} {'x':>5}")
    if usable:
        header += (f" | {'meas us':>8} {'torch us':>8} {'sdpa us':>8} {'x eager':>7} "
                   f"{'x sdpa':>6} (fused E against eager's)")
    print(header)
    speedups: dict[str, list[float]] = {label: [] for label, _ in targets}
    versus: dict[str, list[float]] = {"eager": [], "eager, softmax": [], "sdpa": []}
    for name in (["G1", "G10"] if small else list(CHAINS)):
        for softmax in (False, True):
            shape = CHAINS[name]
            batch, m, n, k, l_ = shape
            graph = chain_graph(*shape, softmax)
            flops = 2.0 * batch * m * l_ * (k + n)
            row = f"{name + (' softmax' if softmax else ''):14} {flops / 1e9:6.2f}"
            built = {}
            for label, target in targets:
                start = time.perf_counter()
                kernels = lowered_kernels(graph, target, fused=True)
                (kernel,) = kernels
                source = target.codegen(kernel)
                artifact = target.build(source)
                compile_s = time.perf_counter() - start
                arch = target.spec.threads.architectures[0]
                build = artifact.meta["build"]["architectures"][arch]
                fused = target.estimate(kernel)
                bound = next(key[6:] for key in fused.detail if key.startswith("bound_"))
                unfused = sum(target.estimate(k).seconds
                              for k in lowered_kernels(graph, target, fused=False))
                speedups[label].append(unfused / fused.seconds)
                occupancy = build["occupancy"]["occupancy"] if build["occupancy"] else 0.0
                shared = (build["resources"]["static_shared_bytes"]
                          + artifact.meta["build"]["dynamic_shared_bytes"]) / 1024
                row += (f" | {label} {compile_s:6.2f} {build['resources']['registers']:4d} "
                        f"{shared:7.1f} {occupancy:4.0%} {fused.seconds * 1e6:8.1f} "
                        f"{bound.replace('_', ' '):>11} {unfused * 1e6:10.1f} "
                        f"{unfused / fused.seconds:5.2f}")
                built[label] = (artifact, kernel)
            if usable:
                artifact, kernel = built[targets[0][0]]
                arrays = _operands(kernel)
                measured = _measure(artifact, arrays)
                theirs = _torch_seconds(arrays, softmax)
                eager, sdpa, error = theirs if theirs else (None, None, None)
                row += f" | {measured * 1e6:8.1f} " + " ".join(
                    "       -" if v is None else f"{v * 1e6:8.1f}" for v in (eager, sdpa))
                row += " " + " ".join("      -" if v is None else f"{v / measured:7.2f}"
                                      for v in (eager, sdpa))
                if error is not None:   # fp16 operands, fp32 accumulation on both sides
                    row += f" max|E-eager| {error:.1e}" + ("" if error < 5e-2 else " MISMATCH")
                if eager is not None:
                    versus["eager, softmax" if softmax else "eager"].append(eager / measured)
                if sdpa is not None:
                    versus["sdpa"].append(sdpa / measured)
            print(row, flush=True)
    for label, values in speedups.items():
        print(f"{label}: predicted unfused / fused time, geomean "
              f"{statistics.geometric_mean(values):.2f}x (min {min(values):.2f}x, max "
              f"{max(values):.2f}x) over {len(values)} chains")
    for against, values in versus.items():
        if values:
            print(f"measured: PyTorch {against} / fused, geomean "
                  f"{statistics.geometric_mean(values):.2f}x (min {min(values):.2f}x, max "
                  f"{max(values):.2f}x) over {len(values)} chains")
    if not usable:
        print("no GPU here: the times above are the model's predictions only")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="G1 and G10 only")
    raise SystemExit(main(parser.parse_args().small))
