"""FPGA HLS target on the model (estimate mode; no Vitis HLS and no board here): for the conv
layers of AlexNet (FPGA'15's five, two groups each) and YOLO-v1 (its distinct shapes) on a
VU9P, the design the core's tuner finds in the template's space — predicted GOP/s, DSP and
BRAM18K use, search time — next to the FPGA'15 design point scaled to the VU9P (Tn = 7, Tm
from the same 80% DSP share: 156, the largest row tile that fits the BRAM;
tilecraft_fpga_hls.published.comparison), both costed by the same model; then the
C-simulation time (g++ build and run) of the generated C++ of a small conv layer, checked
against the numpy reference.

    .venv/bin/python bench/bench_fpga.py [--small] [--trials N] [--engine q|random|...]
"""

from __future__ import annotations

import argparse
import math
import platform
import tempfile
import time

import numpy as np
from common import geomean, print_table
from tilecraft_fpga_hls.device import VU9P
from tilecraft_fpga_hls.published.comparison import YOLO_V1, compare_layer
from tilecraft_fpga_hls.published.fpga15 import ALEXNET, ConvLayer

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.reference import evaluate


def _compare(title: str, layers: tuple[ConvLayer, ...], trials: int, engine: str,
             database: str) -> float:
    rows, speedups = [], []
    fpga15_seconds = searched_seconds = 0.0
    operations = 0
    for layer in layers:
        result = compare_layer(layer, VU9P, trials, database, engine=engine)
        speedups.append(result.speedup)
        fpga15_seconds += result.fpga15.seconds * layer.groups
        searched_seconds += result.searched.seconds * layer.groups
        operations += layer.operations
        cfg = result.searched_config
        rows.append([
            layer.name, f"{layer.m}x{layer.n} {layer.r}x{layer.c} k{layer.k}s{layer.s}",
            f"{result.gops(result.fpga15):.1f}", f"{result.gops(result.searched):.1f}",
            f"{result.speedup:.2f}",
            f"{result.searched.usage.dsp:.0f}", f"{result.searched.usage.bram18k:.0f}",
            f"{result.fpga15.usage.dsp:.0f}", f"{result.fpga15.usage.bram18k:.0f}",
            f"{cfg['pe_out']}{cfg['tm']}x{cfg['pe_in']}{cfg['tn']} l{cfg['lanes']}",
            f"{result.trials}", f"{result.search_seconds:.1f}"])
    print_table(f"{title} on the {VU9P.name} ({VU9P.clock_hz / 1e6:g} MHz, "
                f"{VU9P.dsp_slices} DSP, {2 * VU9P.bram36_blocks} BRAM18K), model estimates",
                ["layer", "shape", "FPGA'15 GOP/s", "searched GOP/s", "x", "DSP", "BRAM18K",
                 "FPGA'15 DSP", "FPGA'15 BRAM", "searched PE array", "trials", "search s"],
                rows)
    whole = fpga15_seconds / searched_seconds
    print(f"whole network: FPGA'15 {operations / fpga15_seconds / 1e9:.1f} GOP/s, searched "
          f"{operations / searched_seconds / 1e9:.1f} GOP/s: {whole:.2f}x "
          f"(geomean per layer {geomean(speedups):.2f}x; thesis §4.7.3: 1.5x)")
    return whole


def _csim(small: bool) -> None:
    channels, size, filters = (4, 9, 8) if small else (16, 30, 32)
    x = te.placeholder((1, channels, size, size), name="X")
    w = te.placeholder((filters, channels, 3, 3), name="W")
    y = ops.conv2d(x, w)
    started = time.perf_counter()
    exe = tc.compile(y, target="fpga_hls")  # the model's default design, built with g++
    compiled = time.perf_counter() - started
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(x.shape).astype(np.float32)
    ws = rng.standard_normal(w.shape).astype(np.float32)
    started = time.perf_counter()
    got = exe(xs, ws)
    ran = time.perf_counter() - started
    error = float(np.abs(got - evaluate(y, {x: xs, w: ws})).max())
    (kernel,) = exe.kernels
    print(f"\n## C-simulation of a {channels}->{filters} channel 3x3 conv on {size}x{size}")
    print(f"compile (model's design + HLS C++ + g++): {compiled:.2f} s; C-sim run: "
          f"{ran * 1e3:.1f} ms; max |error| vs numpy {error:.1e}")
    print(f"design: {kernel.attrs.get('schedule', 'default')}")
    if not math.isfinite(error) or error > 1e-3:
        raise SystemExit("the C-simulation does not match the reference")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true",
                        help="100 trials, AlexNet and the first 4 YOLO layers (a smoke run)")
    parser.add_argument("--trials", type=int, default=None, help="tuner trials per layer")
    parser.add_argument("--engine", default="q", help="search engine (default q)")
    args = parser.parse_args()
    trials = args.trials or (100 if args.small else 400)
    print(f"host: {platform.processor() or platform.machine()}; {trials} trials per layer, "
          f"engine {args.engine}")
    with tempfile.TemporaryDirectory() as folder:
        database = f"{folder}/fpga.sqlite"
        _compare("AlexNet conv layers", ALEXNET, trials, args.engine, database)
        _compare("YOLO-v1 conv layers", YOLO_V1[:4] if args.small else YOLO_V1, trials,
                 args.engine, database)
    _csim(args.small)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
