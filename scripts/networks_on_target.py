"""Compile the model zoo (tilecraft.models) for one target, run each network there and compare
its output with the numpy reference (rtol = atol = 1e-3). Where the target has its hardware
(an NVIDIA GPU with a driver, say) the kernels run natively; elsewhere they run as the target
runs them without it (the NVIDIA plugin: its CUDA source against the emulation header).

    python scripts/networks_on_target.py TARGET [--jobs N] [--torch DEVICE] [NAME[:full] ...]

A bare NAME is the small configuration, ``NAME:full`` the full size (batch 1, sequence 512,
224^2); no NAME means every network, small. Each network compiles in a process of its own,
``--jobs`` at a time (the targets' builds are one process each; a machine with many cores
compiles the zoo in the time of its slowest network). One line per network: compile time,
the first and the median of three further calls (wall time, copies included), the largest
difference from the reference and MATCH or MISMATCH; exit status 1 when any failed.
``--torch DEVICE`` (``cpu``, ``cuda``) adds PyTorch eager on that device with the same seeded
weights (bench/torch_networks.py): the median of three calls, the result copied back to the
host as ours is, and its time over ours (> 1: tilecraft is faster).

Example (H200, 2026-11-28: every network, small and full size, MATCH):

    python scripts/networks_on_target.py nvidia_tc --jobs 8 bert_base resnet18:full
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

import tilecraft as tc
import tilecraft.models as models

RTOL = ATOL = 1e-3


def torch_seconds(name: str, small: bool, x: np.ndarray, device: str) -> float:
    """PyTorch eager's median seconds of three calls of network ``name`` on ``device``
    (after a warm-up call), the result copied to the host."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from torch_networks import torch_network

    forward = torch_network(name, small=small, device=device)
    forward(x).cpu()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        forward(x).cpu()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def check(target: str, job: str, torch_device: str | None = None) -> tuple[bool, str]:
    """Compile, run and compare one network (``name`` or ``name:full``); (matched, line)."""
    name, _, size = job.partition(":")
    small = size != "full"
    try:
        graph = models.build(name, small=small)
        start = time.perf_counter()
        executable = tc.compile(graph, target=target)
        compile_s = time.perf_counter() - start
        x = np.random.default_rng(1).standard_normal(graph.inputs[0].shape).astype(np.float32)
        start = time.perf_counter()
        out = np.asarray(executable(x=x))
        first_s = time.perf_counter() - start
        times = []
        for _ in range(3):
            start = time.perf_counter()
            executable(x=x)
            times.append(time.perf_counter() - start)
        expected = tc.reference.run(graph, x=x)
        error = float(np.max(np.abs(out - expected)))
        matched = bool(np.allclose(out, expected, rtol=RTOL, atol=ATOL))
        ours = statistics.median(times)
        versus = ""
        if torch_device is not None:
            theirs = torch_seconds(name, small, x, torch_device)
            versus = f"  torch {torch_device} {theirs * 1e3:8.1f} ms ({theirs / ours:.2f}x)"
        return matched, (f"{name:18s} {'small' if small else 'full ':5s} compile "
                         f"{compile_s:6.1f} s  first {first_s * 1e3:9.1f} ms  median "
                         f"{ours * 1e3:9.1f} ms{versus}  max|out-ref| {error:.1e} "
                         f"(max|ref| {float(np.max(np.abs(expected))):.2f})  "
                         f"{'MATCH' if matched else 'MISMATCH'}")
    except Exception as error:  # noqa: BLE001 - one network's failure is reported, not raised
        return False, f"{name:18s} {'small' if small else 'full ':5s} FAILED " \
                      f"{type(error).__name__}: {str(error)[:500]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("networks", nargs="*", default=list(models.NETWORKS))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--torch", metavar="DEVICE", default=None)
    args = parser.parse_intermixed_args(argv)
    for job in args.networks:
        if job.partition(":")[0] not in models.NETWORKS:
            parser.error(f"unknown network {job!r}; known: {', '.join(models.NETWORKS)}")
    print(f"target {args.target}", flush=True)
    failed = 0
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for matched, line in pool.map(check, [args.target] * len(args.networks), args.networks,
                                      [args.torch] * len(args.networks)):
            failed += not matched
            print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
