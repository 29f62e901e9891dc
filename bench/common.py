"""Shared helpers of the benchmark scripts: median timing, optional PyTorch, table printing.

Absolute times drift on a shared 2-core machine; the ratios measured side by side in one run
are what to quote.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def median_seconds(fn: Callable[[], Any], repeat: int = 15, warmup: int = 2,
                   min_seconds: float = 0.2) -> float:
    """Median of ``repeat`` timed calls (more when calls are short, up to ``min_seconds``)."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < repeat or (time.perf_counter() - started < min_seconds
                                  and len(times) < 200):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


#: pause before each runner's round (see :func:`alternated`)
SETTLE_SECONDS = 0.05
#: about how long a round of one runner's calls takes (at least 3 calls)
ROUND_SECONDS = 0.1


def alternated(runs: list[tuple[str, Callable[[], Any]]], rounds: int,
               round_seconds: float = ROUND_SECONDS) -> dict[str, float]:
    """Median seconds of each runner, timed in ``rounds`` alternated rounds after a pause of
    :data:`SETTLE_SECONDS` and an untimed call: the runner before may leave its worker threads
    spinning a while after its call returns (each onnxruntime session's do by default), which
    at 2 threads on 2 cores halved the next runner's calls. A round is the median of at least
    3 calls, more for a short call (as many as take about ``round_seconds``), so a few-ms
    network is not judged on a handful of calls."""
    calls: dict[str, int] = {}
    for label, run in runs:
        run()
        start = time.perf_counter()
        run()
        calls[label] = max(3, min(100, int(round_seconds / max(time.perf_counter() - start,
                                                               1e-6))))
    times: dict[str, list[float]] = {label: [] for label, _ in runs}
    for _ in range(rounds):
        for label, run in runs:
            time.sleep(SETTLE_SECONDS)
            run()
            round_times = []
            for _ in range(calls[label]):
                start = time.perf_counter()
                run()
                round_times.append(time.perf_counter() - start)
            times[label].append(statistics.median(round_times))
    return {label: statistics.median(values) for label, values in times.items()}


def load_torch(threads: int) -> Any | None:
    """PyTorch set to ``threads`` threads, or None when it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


def threads_from_env() -> int:
    return int(os.environ.get("TILECRAFT_THREADS", str(os.cpu_count() or 1)))


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    print(f"\n## {title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def geomean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def measured_ceiling_flops(threads: int, dtype: str = "float32") -> tuple[float, str]:
    """The host's peak rate for ``threads`` cores in ``dtype``, as the x86 target's spec carries
    it (one core's fp32 FMA rate measured by its probe, cached per CPU), and where it came
    from. Benchmarks print their rates as a percentage of it, never of a constant."""
    from tilecraft.target.registry import get_target

    spec = get_target("x86_avx512").spec
    per_core = spec.compute.flops_per_core(dtype)
    source = "measured" if dtype in spec.compute.peak_flops_per_core else "formula"
    return per_core * threads, source


def amx_note() -> str:
    """A line saying that products with constant weights run on AMX tiles, where the x86
    plugin maps them there (the float32 FMA ceiling is then not theirs), or ``""``."""
    from tilecraft_x86_avx512.amx import amx_permitted
    from tilecraft_x86_avx512.host import host_info
    from tilecraft_x86_avx512.target import X86Avx512Target

    declared = {decl.name for decl in X86Avx512Target(threads=1).spec.micro_kernels}
    rate = host_info().amx_bf16_flops_per_core
    if "amx_split_f32" not in declared and rate is not None:
        return (f"this host's AMX tile unit measured {rate / 1e12:.2f} TFLOP/s bfloat16 per "
                "core: float32 products through its bfloat16 parts would not pay, they run on "
                "FMA (TILECRAFT_X86_AMX=1 puts them on the tiles)")
    if "amx_split_f32" not in declared or not amx_permitted():
        return ""
    return ("products with constant weights run on AMX tiles (float32 through bfloat16 parts, "
            "blocking/amx_split.py): the fp32 ceiling is float32 FMA's, which they can pass; "
            "TILECRAFT_X86_AMX=0 measures the AVX-512 path")


def ceiling_note(threads: int) -> str:
    """One line naming the measured ceiling the tables' '% peak' columns refer to."""
    flops, source = measured_ceiling_flops(threads)
    return f"fp32 ceiling for {threads} core(s): {flops / 1e9:.0f} GFLOP/s ({source})"
