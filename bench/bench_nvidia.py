"""NVIDIA target: per kernel, compile time (lowering + CUDA C + NVRTC for sm_80 and sm_90),
registers / shared memory / occupancy from the build, and the performance model's predicted
time and bound on the A100 (``nvidia_tc``, sm_80) and the H100 (``nvidia_tc:h100``, sm_90).
Each target lowers its own kernel (tiles chosen for its spec).

Where a GPU is available (a CUDA driver and device answer) it also measures each kernel
(median of CUDA-event timings through the plugin's launch path) and PyTorch side by side
(torch.matmul / torch.bmm / F.conv2d in fp16) when torch with CUDA imports. One run on an
H100 is kept in ``bench/data/nvidia_h100_2026-11-28.txt``.

Suite: fp16 GEMM 1024^3 / 4096^3, BERT-base GEMMs (512 tokens), thesis Table 3.5 chains
G1-G12 as two unfused batch GEMMs — each GEMM on the CUDA-core template, on WMMA and on
inline-PTX mma.sync (AMOS's best mapping, default tiles) — the conv2d layers of YOLO-v1
(fp16, batch 1); then the
same chains fused, plain and with softmax, fused vs unfused (bench_nvidia_fused.py).

    .venv/bin/python bench/bench_nvidia.py [--small]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np

from tilecraft import ops, te
from tilecraft.lower.compute import lower_compute
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.registry import get_target

TARGETS = (("A100", "nvidia_tc"), ("H100", "nvidia_tc:h100"))
#: name: (batch, M, N, K, L), thesis Table 3.5
CHAINS = {
    "G1": (8, 512, 64, 64, 512), "G2": (12, 512, 64, 64, 512), "G3": (16, 512, 64, 64, 512),
    "G4": (12, 256, 64, 64, 256), "G5": (16, 256, 64, 64, 256), "G6": (16, 256, 80, 80, 256),
    "G7": (12, 208, 64, 64, 208), "G8": (16, 208, 64, 64, 208), "G9": (16, 208, 80, 80, 208),
    "G10": (1, 512, 64, 64, 256), "G11": (1, 768, 64, 64, 384), "G12": (1, 1024, 64, 64, 512),
}
#: C, K, H(=W), kernel, stride — YOLO-v1 (thesis Table 4.3)
YOLO = [(3, 64, 448, 7, 2), (64, 192, 112, 3, 1), (192, 128, 56, 1, 1), (128, 256, 56, 3, 1),
        (256, 256, 56, 1, 1), (256, 512, 56, 3, 1), (512, 256, 28, 1, 1), (256, 512, 28, 3, 1),
        (512, 512, 28, 1, 1), (512, 1024, 28, 3, 1), (1024, 512, 14, 1, 1),
        (512, 1024, 14, 3, 1), (1024, 1024, 14, 3, 1), (1024, 1024, 14, 3, 2),
        (1024, 1024, 7, 3, 1)]

Case = tuple[str, te.Tensor, float]   # name, compute, flops


#: how each GEMM row is lowered: the CUDA-core template, and AMOS's best mapping onto the
#: Tensor Cores as WMMA and as inline-PTX mma.sync (tilecraft_nvidia_tc.tensor_cores)
GEMM_LOWERINGS = {"": None, " [wmma]": "wmma_", " [mma.sync]": "mma_"}


def _gemm(name: str, m: int, n: int, k: int, batch: int = 0) -> list[Case]:
    lead = (batch,) if batch else ()
    A = te.placeholder((*lead, m, k), "float16", name="A")
    B = te.placeholder((*lead, k, n), "float16", name="B")
    C = (ops.batch_matmul if batch else ops.matmul)(A, B, out_dtype="float32", name="C")
    return [(name + suffix, C, 2.0 * max(batch, 1) * m * n * k) for suffix in GEMM_LOWERINGS]


def _tensor_core_kernel(target, tensor: te.Tensor, prefix: str):
    """The kernel of AMOS's best-ranked mapping onto the spec's intrinsics named ``prefix*``."""
    from tilecraft_nvidia_tc.tensor_cores import lower_tensor_core_mapping

    from tilecraft.intrin import generate, match
    from tilecraft.intrin.perfmodel import rank_mappings

    best = None
    for decl in target.spec.intrinsics:
        found = match(tensor, decl).mappings if decl.name.startswith(prefix) else []
        ranked = [r for r in rank_mappings(tensor, decl, target.spec, mappings=found,
                                           thorough=False) if r.usable] if found else []
        if ranked and (best is None or ranked[0].seconds < best[1].seconds):
            best = (decl, ranked[0])
    decl, chosen = best
    [kernel] = lower_tensor_core_mapping(tensor, generate(tensor, decl, chosen.mapping),
                                         LoweringOptions.from_spec(target.spec))
    return kernel


def cases(small: bool) -> list[Case]:
    result = _gemm("gemm 1024^3", 1024, 1024, 1024)
    if not small:
        result += _gemm("gemm 4096^3", 4096, 4096, 4096)
    for m, n, k in [(512, 768, 768), (512, 3072, 768), (512, 768, 3072)]:
        result += _gemm(f"bert {m}x{n}x{k}", m, n, k)
    for name in (["G1", "G10"] if small else list(CHAINS)):
        b, m, n, k, l_ = CHAINS[name]
        result += _gemm(f"{name} gemm1", m, n, k, b)
        result += _gemm(f"{name} gemm2", m, l_, n, b)
    for index, (c, k, h, r, s) in enumerate(YOLO[2:5] if small else YOLO, 3 if small else 1):
        x = te.placeholder((1, c, h, h), "float16", name="x")
        w = te.placeholder((k, c, r, r), "float16", name="w")
        y = ops.conv2d(x, w, stride=s, padding=r // 2, out_dtype="float32", name="y")
        out = y.shape[2] * y.shape[3]
        result.append((f"yolo{index} {c}->{k} {h}^2 {r}x{r}/{s}", y, 2.0 * k * out * c * r * r))
    return result


def _kernel(target, tensor: te.Tensor, name: str = ""):
    for suffix, prefix in GEMM_LOWERINGS.items():
        if prefix and name.endswith(suffix):
            return _tensor_core_kernel(target, tensor, prefix)
    options = LoweringOptions.from_spec(target.spec)
    kernels = target.lower_compute(tensor, options)
    return kernels[0] if kernels else lower_compute(tensor, options)


def _gpu_runner() -> tuple[Callable | None, str]:
    from tilecraft_nvidia_tc.launch import launch_status

    usable, why = launch_status()
    return (None, why) if not usable else (_measure, why)


def _measure(artifact, kernel, repeat: int = 20) -> float:
    from tilecraft_nvidia_tc.launch import make_launcher, parameters_from_meta

    launcher = make_launcher(artifact.handle, parameters_from_meta(artifact.meta))
    rng = np.random.default_rng(0)
    arrays = {b.name: (rng.standard_normal(b.shape) * 0.1).astype(b.dtype.numpy)
              if b.dtype.is_float else np.zeros(b.shape, b.dtype.numpy)
              for b in kernel.params}
    return statistics.median(launcher.run(arrays, repeat=repeat))


def _torch_seconds(kernel, stride: int) -> float | None:
    """PyTorch's time for the kernel's operator on the GPU (fp16, the kernel's input shapes),
    or None without CUDA torch."""
    try:
        import torch
        import torch.nn.functional as functional
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    shapes = [b.shape for b in kernel.params if b.name not in kernel.outputs]
    if len(shapes) != 2:
        return None
    a, b = (torch.randn(s, device="cuda", dtype=torch.float16) for s in shapes)
    if len(shapes[0]) == 4:
        run = lambda: functional.conv2d(a, b, stride=stride, padding=shapes[1][2] // 2)  # noqa: E731
    else:
        run = lambda: torch.matmul(a, b)  # noqa: E731
    run()
    times = []
    for _ in range(20):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true",
                        help="a few kernels of each kind (compile time in check)")
    args = parser.parse_args()
    targets = [(label, get_target(name)) for label, name in TARGETS]
    measure, why = _gpu_runner()
    print(f"host: {platform.processor() or platform.machine()}; GPU: "
          f"{why if measure else 'none (' + why + ')'}")
    print("model: predicted time and bound per kernel (roofline per level inside AMOS's "
          "Eq. 5.6-5.8, occupancy from the build)")
    header = f"{'kernel':28} {'GFLOP':>7}"
    for label, _ in targets:
        header += (f" | {label} {'comp s':>6} {'regs':>4} {'smem KB':>7} {'occ':>4} "
                   f"{'pred ms':>8} {'TFLOPS':>6} {'bound':>11}")
    if measure:
        header += f" | {'meas ms':>8} {'torch ms':>8}"
    print(header)
    ratios = []
    for name, tensor, flops in cases(args.small):
        row = f"{name:28} {flops / 1e9:7.2f}"
        predicted = {}
        artifacts = {}
        for label, target in targets:
            start = time.perf_counter()
            kernel = _kernel(target, tensor, name)
            artifact = target.build(target.codegen(kernel))
            compile_s = time.perf_counter() - start
            from tilecraft_nvidia_tc.model import KernelProfile, estimate_profile

            arch = target.spec.threads.architectures[0]
            built = artifact.meta["build"]["architectures"][arch]
            estimate = estimate_profile(
                KernelProfile.from_dict(target.codegen(kernel).meta["model_profile"]),
                target.spec, artifact.meta["build"])
            shared = (built["resources"]["static_shared_bytes"]
                      + artifact.meta["build"]["dynamic_shared_bytes"]) / 1024
            occupancy = built["occupancy"]["occupancy"] if built["occupancy"] else 0.0
            predicted[label] = estimate.seconds
            artifacts[label] = (artifact, kernel, arch)
            row += (f" | {label} {compile_s:6.2f} {built['resources']['registers']:4d} "
                    f"{shared:7.1f} {occupancy:4.0%} {estimate.seconds * 1e3:8.3f} "
                    f"{flops / estimate.seconds / 1e12:6.1f} {estimate.bound:>11}")
        ratios.append(predicted["A100"] / predicted["H100"])
        if measure:
            from tilecraft_nvidia_tc.launch.driver import Device, load_driver

            device_arch = Device(load_driver()).architecture
            label = "H100" if device_arch == "sm_90" else "A100"
            artifact, kernel, _ = artifacts[label]
            measured = _measure(artifact, kernel)
            theirs = _torch_seconds(kernel, stride=2 if name.endswith("/2") else 1)
            row += f" | {measured * 1e3:8.3f} " + ("-" if theirs is None
                                                    else f"{theirs * 1e3:8.3f}")
        print(row, flush=True)
    print(f"\npredicted A100 / H100 time: geomean {statistics.geometric_mean(ratios):.2f}x "
          f"(min {min(ratios):.2f}x, max {max(ratios):.2f}x) over {len(ratios)} kernels")
    if not measure:
        print("no GPU here: the figures above are the model's predictions only")
    print()
    from bench_nvidia_fused import main as fused_chains  # the fused Table 3.5 chains

    return fused_chains(args.small)


if __name__ == "__main__":
    raise SystemExit(main())
