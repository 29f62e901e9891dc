"""Tensorized x86 code: int8 on AVX512-VNNI ``vpdpbusd``, bfloat16 on AVX512-BF16 ``vdpbf16ps``.

Three tables, 1 and 2 threads:

1. int8 GEMM 1024^3 (and 512^3, 2048^3 unless ``--quick``): tilecraft uint8 x int8 -> int32
   (``vnni_u8s8`` directly) and int8 x int8 -> int32 (A shifted to uint8, compensated) against
   ``torch._int_mm`` (int8 x int8 -> int32, oneDNN), in GOP/s;
2. the 12 conv2d layers of ResNet-18 in thesis Table 5.4 (C0-C11) in int8, batch 1 (the table's
   batch is 16; tilecraft's template takes batch-1 NCHW convolutions): tilecraft uint8
   activations x int8 weights -> int32 (pad kernel, im2col, packing and ``vnni_s8u8`` included)
   against PyTorch's quantized conv2d (``torch.ao.nn.quantized.Conv2d``, weights packed once
   when the module is built — tilecraft packs its weights on every call; quint8 x qint8 ->
   quint8, engine ``x86``: fbgemm/oneDNN; its output is requantized to uint8, ours is the
   int32 sum);
3. bfloat16 GEMM (``dot_bf16``, float32 result) against float32 GEMM of the same shapes, ours
   (``outer_product_f32``) and PyTorch's (``torch.mm`` in float32 — MKL — and in bfloat16).

Timing: medians of blocks of back-to-back calls (:func:`block_median`). PyTorch runs in a
subprocess per thread count (``--torch-worker``, as ``bench_gemm.py`` does for OpenBLAS):
its OpenMP workers keep spinning for a while after each call, and on this VM (whose idle vCPU
halts) a thread pool that sleeps between calls, like tilecraft's, then loses each wake-up race
for the second core — side by side in one process, 2-thread timings of ours were serial-speed
whenever they followed a PyTorch call. Both processes fix glibc's mmap and trim thresholds
(:func:`steady_malloc`): tilecraft's Executable allocates its workspaces (packed operands, the
im2col matrix) with ``np.empty`` on every call, and with glibc's dynamic thresholds a
convolution's 1-2 MB workspaces came back as fresh pages — page faults on every call, 5x the
kernels' time on ResNet-18's C1. Every tilecraft result is checked first (exactly for
integers). Run: ``python bench/bench_int8_bf16.py`` (``--quick``: 1024^3, six conv layers;
``--only gemm,conv,bf16``: a subset of the tables; ``--threads 1,2``: the thread counts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from common import geomean, print_table
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te

ROUNDS = 3
BLOCK = 9
#: thesis Table 5.4: (name, C, K, P(=Q), R(=S)); stride 2 where the layer halves the image
RESNET18 = [("C0", 3, 64, 112, 7), ("C1", 64, 64, 56, 3), ("C2", 64, 64, 56, 1),
            ("C3", 64, 128, 28, 3), ("C4", 64, 128, 28, 1), ("C5", 128, 128, 28, 3),
            ("C6", 128, 256, 14, 3), ("C7", 128, 256, 14, 1), ("C8", 256, 256, 14, 3),
            ("C9", 256, 512, 7, 3), ("C10", 256, 512, 7, 1), ("C11", 512, 512, 7, 3)]
#: layers whose input is twice the output (ResNet-18's down-sampling convolutions)
STRIDE_2 = {"C0", "C3", "C4", "C6", "C7", "C9", "C10"}


def steady_malloc() -> None:
    """glibc keeps freed blocks below 64 MiB in the heap instead of unmapping them (so an array
    freed and allocated again per call reuses its pages); a no-op where there is no glibc."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 64 << 20)
    libc.mallopt(m_trim_threshold, 256 << 20)


def block_median(fn: Callable[[], object], rounds: int = ROUNDS, block: int = BLOCK) -> float:
    """Median seconds of ``fn`` over ``rounds`` blocks of ``block`` back-to-back calls (the
    first third of each block warms up and is not counted)."""
    times = []
    for _ in range(rounds):
        for call in range(block):
            start = time.perf_counter()
            fn()
            if call >= block // 3:
                times.append(time.perf_counter() - start)
    return float(np.median(times))


def _int8(shape, dtype, rng) -> np.ndarray:
    low = 0 if dtype == "uint8" else -128
    return rng.integers(low, low + 256, shape).astype(dtype)


def _conv_shape(layer: tuple) -> tuple[str, int, int, int, int, int, int]:
    name, c, k, p, r = layer
    stride = 2 if name in STRIDE_2 else 1
    return name, c, k, p, r, stride, p * stride


def _conv_reference(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """An exact int64 convolution (NCHW, batch 1) through numpy's sliding windows."""
    padded = np.pad(x[0].astype(np.int64), ((0, 0), (pad, pad), (pad, pad)))
    r = w.shape[2]
    windows = np.lib.stride_tricks.sliding_window_view(padded, (r, r), axis=(1, 2))
    windows = windows[:, ::stride, ::stride]                      # C, P, Q, R, S
    return np.einsum("cpqrs,kcrs->kpq", windows, w.astype(np.int64))[None]


# PyTorch, in its own process ------------------------------------------------------------------
def torch_worker(threads: int, plan: dict[str, Any]) -> dict[str, float]:
    """Seconds per case for PyTorch with ``threads`` threads (run with ``--torch-worker``)."""
    import warnings

    import torch
    import torch.ao.nn.quantized as quantized

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    torch.backends.quantized.engine = "x86"
    rng = np.random.default_rng(0)
    out: dict[str, float] = {}
    for n in plan["gemm"]:
        a = torch.from_numpy(_int8((n, n), "int8", rng))
        b = torch.from_numpy(_int8((n, n), "int8", rng))
        out[f"gemm {n}"] = block_median(lambda: torch._int_mm(a, b))
    for layer in plan["conv"]:
        name, c, k, p, r, stride, h = _conv_shape(layer)
        qx = torch.quantize_per_tensor(torch.from_numpy(
            _int8((1, c, h, h), "uint8", rng).astype(np.float32)), 1.0, 0, torch.quint8)
        qw = torch.quantize_per_tensor(torch.from_numpy(
            _int8((k, c, r, r), "int8", rng).astype(np.float32)), 1.0, 0, torch.qint8)
        module = quantized.Conv2d(c, k, r, stride=stride, padding=r // 2)
        module.set_weight_bias(qw, None)   # packed once, as a deployed model holds it
        module.scale, module.zero_point = 4096.0, 0
        out[f"conv {name}"] = block_median(lambda module=module, qx=qx: module(qx), rounds=2)
    for m, n, k in plan["bf16"]:
        a = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32))
        b = torch.from_numpy(rng.standard_normal((k, n)).astype(np.float32))
        out[f"f32 {m}x{n}x{k}"] = block_median(lambda a=a, b=b: torch.mm(a, b))
        abf, bbf = a.bfloat16(), b.bfloat16()
        out[f"bf16 {m}x{n}x{k}"] = block_median(lambda a=abf, b=bbf: torch.mm(a, b))
    return out


def torch_times(threads: int, plan: dict[str, Any]) -> dict[str, float]:
    """:func:`torch_worker` in a subprocess; empty when PyTorch is not installed."""
    result = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-worker",
                             str(threads), json.dumps(plan)], capture_output=True, text=True)
    if result.returncode:
        print(f"(PyTorch timings unavailable: {result.stderr.strip().splitlines()[-1:]})")
        return {}
    return json.loads(result.stdout.strip().splitlines()[-1])


# tilecraft ------------------------------------------------------------------------------------
def int8_gemm(sizes: list[int], threads: int, theirs: dict[str, float], rng) -> None:
    rows, ratios = [], {"uint8": [], "int8": []}
    for n in sizes:
        b = _int8((n, n), "int8", rng)
        gops = {}
        for a_dtype in ("uint8", "int8"):
            a = _int8((n, n), a_dtype, rng)
            A = te.placeholder((n, n), a_dtype, name="A")
            B = te.placeholder((n, n), "int8", name="B")
            exe = tc.compile(ops.matmul(A, B, out_dtype="int32", name="C"),
                             target=X86Avx512Target(threads=threads))
            np.testing.assert_array_equal(exe(a, b), a.astype(np.int64) @ b.astype(np.int64))
            gops[a_dtype] = 2 * n**3 / block_median(lambda exe=exe, a=a: exe(a, b)) / 1e9
        torch_gops = 2 * n**3 / theirs.get(f"gemm {n}", float("nan")) / 1e9
        for key in ratios:
            ratios[key].append(gops[key] / torch_gops)
        rows.append([f"{n}^3", f"{gops['uint8']:.0f}", f"{gops['int8']:.0f}", f"{torch_gops:.0f}",
                     f"{gops['uint8'] / torch_gops:.2f}", f"{gops['int8'] / torch_gops:.2f}"])
    if len(sizes) > 1:
        rows.append(["geomean", "", "", "", f"{geomean(ratios['uint8']):.2f}",
                     f"{geomean(ratios['int8']):.2f}"])
    print_table(f"int8 GEMM GOP/s, {threads} thread(s)",
                ["MxNxK", "u8xs8", "s8xs8", "torch._int_mm", "u8s8/torch", "s8s8/torch"], rows)


def resnet_convs(layers: list[tuple], threads: int, theirs: dict[str, float], rng) -> None:
    rows, ratios = [], []
    for layer in layers:
        name, c, k, p, r, stride, h = _conv_shape(layer)
        x = te.placeholder((1, c, h, h), "uint8", name="x")
        w = te.placeholder((k, c, r, r), "int8", name="w")
        conv = ops.conv2d(x, w, stride=stride, padding=r // 2, out_dtype="int32", name="y")
        exe = tc.compile(conv, target=X86Avx512Target(threads=threads))
        xa, wa = _int8((1, c, h, h), "uint8", rng), _int8((k, c, r, r), "int8", rng)
        np.testing.assert_array_equal(exe(xa, wa), _conv_reference(xa, wa, stride, r // 2))
        ops_count = 2 * k * p * p * c * r * r
        ours = ops_count / block_median(lambda exe=exe, xa=xa, wa=wa: exe(xa, wa), rounds=2) / 1e9
        torch_gops = ops_count / theirs.get(f"conv {name}", float("nan")) / 1e9
        ratios.append(ours / torch_gops)
        rows.append([name, f"{c}->{k} {r}x{r}/{stride} {p}x{p}", f"{ours:.0f}",
                     f"{torch_gops:.0f}", f"{ours / torch_gops:.2f}"])
    rows.append(["geomean", "", "", "", f"{geomean(ratios):.2f}"])
    print_table(f"ResNet-18 conv2d (Table 5.4) int8, batch 1, GOP/s, {threads} thread(s)",
                ["layer", "shape", "tilecraft u8xs8", "torch quantized (x86)", "ratio"], rows)


def bf16_gemm(shapes: list[tuple[int, int, int]], threads: int, theirs: dict[str, float],
              rng) -> None:
    rows = []
    for m, n, k in shapes:
        a32 = rng.standard_normal((m, k)).astype(np.float32)
        b32 = rng.standard_normal((k, n)).astype(np.float32)
        abf, bbf = a32.astype(ml_dtypes.bfloat16), b32.astype(ml_dtypes.bfloat16)
        exes = {}
        for dtype, out in (("bfloat16", "float32"), ("float32", None)):
            A = te.placeholder((m, k), dtype, name="A")
            B = te.placeholder((k, n), dtype, name="B")
            exes[dtype] = tc.compile(ops.matmul(A, B, out_dtype=out, name="C"),
                                     target=X86Avx512Target(threads=threads))
        exact = abf.astype(np.float64) @ bbf.astype(np.float64)
        np.testing.assert_allclose(exes["bfloat16"](abf, bbf), exact, rtol=1e-3,
                                   atol=1e-4 * np.sqrt(k))
        np.testing.assert_allclose(exes["float32"](a32, b32), a32.astype(np.float64) @ b32,
                                   rtol=1e-3, atol=1e-4 * np.sqrt(k))
        flop = 2 * m * n * k
        ours_bf16 = flop / block_median(lambda: exes["bfloat16"](abf, bbf)) / 1e9
        ours_f32 = flop / block_median(lambda: exes["float32"](a32, b32)) / 1e9
        key = f"{m}x{n}x{k}"
        torch_f32 = flop / theirs.get(f"f32 {key}", float("nan")) / 1e9
        torch_bf16 = flop / theirs.get(f"bf16 {key}", float("nan")) / 1e9
        rows.append([key, f"{ours_bf16:.0f}", f"{ours_f32:.0f}", f"{torch_f32:.0f}",
                     f"{torch_bf16:.0f}", f"{ours_bf16 / ours_f32:.2f}",
                     f"{ours_bf16 / torch_f32:.2f}", f"{ours_bf16 / torch_bf16:.2f}"])
    print_table(f"bf16 vs fp32 GEMM GFLOP/s, {threads} thread(s)",
                ["MxNxK", "ours bf16", "ours f32", "torch f32", "torch bf16", "bf16/f32",
                 "bf16/torch f32", "bf16/torch bf16"], rows)


def main() -> None:
    steady_malloc()
    if "--torch-worker" in sys.argv:
        at = sys.argv.index("--torch-worker")
        print(json.dumps(torch_worker(int(sys.argv[at + 1]), json.loads(sys.argv[at + 2]))))
        return
    quick = "--quick" in sys.argv
    only = _option("--only", "gemm,conv,bf16").split(",")
    thread_counts = [int(t) for t in _option("--threads", "1,2").split(",")]
    rng = np.random.default_rng(0)
    plan = {"gemm": [1024] if quick else [512, 1024, 2048],
            "conv": RESNET18[1:12:2] if quick else RESNET18,
            "bf16": [(1024, 1024, 1024)] if quick else [(1024, 1024, 1024), (512, 3072, 768)]}
    plan = {key: value if key in only else [] for key, value in plan.items()}
    for threads in thread_counts:
        theirs = torch_times(threads, plan)
        if plan["gemm"]:
            int8_gemm(plan["gemm"], threads, theirs, rng)
        if plan["conv"]:
            resnet_convs([tuple(layer) for layer in plan["conv"]], threads, theirs, rng)
        if plan["bf16"]:
            bf16_gemm([tuple(shape) for shape in plan["bf16"]], threads, theirs, rng)


def _option(name: str, default: str) -> str:
    """The value after ``name`` on the command line, or ``default``."""
    if name in sys.argv[:-1]:
        return sys.argv[sys.argv.index(name) + 1]
    return default


if __name__ == "__main__":
    main()
