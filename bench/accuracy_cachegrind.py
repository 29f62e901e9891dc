"""Chimera's data-movement model against cachegrind (thesis Fig. 3.11 d-f; issue 4, item 7).

For the GEMM chain ``C = A x B`` (M x K . K x L), ``E = C x D`` (. L x N), several loop orders
and many tile vectors, this script generates a C program implementing exactly the fused loop
nest that :func:`tilecraft.fusion.analyze` models, runs it under valgrind's cachegrind with the
x86 target's caches, and compares the bytes moved into the simulated L1 (D1 misses x 64 B) with
the model's predicted DV. It prints a table, then R^2 and the Pearson correlation per order and
overall. Run: ``python bench/accuracy_cachegrind.py`` (about 2 minutes on 2 cores; ``--size
256`` is quicker; far below that the whole chain fits in the L1 and the model, which counts
every reload, over-predicts by design).

Choices, and why:

- **Level.** Like the thesis (which measured L1 <-> L2), the modelled level is the target's L1
  (this machine's size, ways and line size, from the spec; e.g. 32 KiB, 8 ways on Zen 4):
  cachegrind's D1 is that L1, its LL the target's L2, and the measurement is the D1 misses of
  the kernel function alone (initialisation and checking are in other functions).
  Cachegrind counts line fills, never write-backs; Algorithm 1 likewise counts one movement
  per visit of the output tile, so the two count the same thing.
- **Orders.** ``mlkn`` (Fig. 3.11 d; the order ``solve_chain`` picks for this chain: C is
  computed once per (m, l) tile and kept in a local buffer across ``n``) and ``mlnk`` (Fig.
  3.11 e; its own data-movement class in ``dataflow_classes(chain, prune_dominated=False)``:
  the producer runs inside ``n``, so C tiles are recomputed per ``n`` tile and A and B are
  reloaded by every loop). Any legal order may be given with ``--orders``. Orders that keep a
  tile *stationary* while the producer's ``k`` loop streams panels of A and B (``nmlk`` keeps
  E over ``l``, ``lnmk`` keeps D over ``m``) measure 1.0-1.2x the prediction: an LRU cache
  evicts that tile between its uses (the excess is E's ``M*N*(L/T_L - 1)``), where Algorithm 1
  treats the level as a buffer that keeps it.
- **Loop nest.** For an order, loops outside the producer's private loop ``k`` are shared;
  the producer block runs ``k`` (a loop it does not use that lies inside ``k`` is dropped for
  it, as Algorithm 1's ``keep_reuse`` never multiplies by it), then the consumer block runs the
  remaining loops of the order (``n`` where it lies inside ``k``). The C tile (T_M x T_L) is a
  local buffer, zeroed for every producer run; E's tile is zeroed on its first visit (l = 0).
- **Tiles.** A seeded random sample of power-of-two tile vectors (at least 16, so that a tile
  row is whole 64-byte lines, as the model counts elements, not lines) whose memory usage MU
  fits the L1, plus the solver's own tiles per order (``solve_order``, tiles of k, l, n
  multiples of 16; often partial tiles at the boundaries). Tilings beyond the capacity are
  left out: Algorithm 1 assumes MU <= capacity, and beyond it the cache thrashes inside a tile.
- **Padding.** Rows of A, B, D, E are padded by one cache line (``--pad 16`` floats): with a
  2 KiB row stride every row of a tile would map to the same two of the 64 L1 sets and
  conflict misses, which a capacity model does not know, would dominate (``--pad 0``: up to
  20x the prediction).

Where the model and the cache part: near the capacity (MU > ~3/4 L1) an LRU cache still holds
the tiles a step replaces while it loads the new ones, so MU plus the replaced tiles must fit,
or the C tile thrashes (the solver's own L1 tiles for ``mlkn`` measure 2.1x); and far below
it, the cache keeps parts of panels the model counts as reloaded (measured < predicted).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilecraft.fusion import (
    Chain,
    FusionError,
    LoopConstraint,
    analyze,
    gemm_chain,
    is_legal,
    legal_orders,
    solve_order,
)
from tilecraft.target.registry import get_target

#: cachegrind needs an I1 cache too; instruction misses are not part of the measurement
I1_CACHE = "32768,8,64"
LOOPS = ("m", "n", "k", "l")
DEFAULT_ORDERS = ("mlkn", "mlnk")
COMPILE_FLAGS = ("-O2", "-mavx2", "-std=c11")  # AVX2 loads: valgrind has no AVX-512


@dataclass(frozen=True)
class Cache:
    """One simulated cache: its size, ways and line size as cachegrind's ``--D1=`` wants."""

    name: str
    size_bytes: int
    ways: int
    line_bytes: int

    @property
    def flag(self) -> str:
        return f"{self.size_bytes},{self.ways},{self.line_bytes}"


@dataclass(frozen=True)
class FusedNest:
    """The fused loop nest of an order: shared loops (outermost first), then the producer
    block's loops, then the consumer block's loops."""

    order: str
    shared: tuple[str, ...]
    producer: tuple[str, ...]
    consumer: tuple[str, ...]


@dataclass(frozen=True)
class Measurement:
    """One tiling of one order: the model's prediction and cachegrind's count."""

    order: str
    tiles: Mapping[str, int]
    usage_bytes: int
    predicted_bytes: int
    measured_bytes: int
    memory_bytes: int
    source: str = "sample"


def simulated_cache(name: str, size_bytes: int, ways: int | None, line_bytes: int) -> Cache:
    """A cache cachegrind accepts: its set count must be a power of two. The spec's ways are
    used when they give one; otherwise (ways unknown, or a geometry cachegrind cannot
    simulate) the nearest way count that does, so the size and line stay the machine's.

    >>> simulated_cache("L1", 32768, 8, 64).flag, simulated_cache("L1", 49152, 12, 64).flag
    ('32768,8,64', '49152,12,64')
    >>> simulated_cache("L1", 32768, None, 64).flag, simulated_cache("L2", 1310720, 16, 64).flag
    ('32768,8,64', '1310720,20,64')
    """
    lines = size_bytes // line_bytes
    candidates = [w for w in range(1, lines + 1)
                  if lines % w == 0 and (lines // w) & (lines // w - 1) == 0]
    if not candidates:
        raise ValueError(f"cachegrind cannot simulate {name}: {size_bytes} bytes in "
                         f"{line_bytes}-byte lines has no power-of-two set count")
    wanted = ways if ways is not None else 8
    chosen = min(candidates, key=lambda w: (abs(w - wanted), w))
    return Cache(name, size_bytes, chosen, line_bytes)


def target_caches(level: str = "L1", next_level: str = "L2") -> tuple[Cache, Cache]:
    """The modelled level and the one below it, with the geometry (size, ways, line) of the
    x86 target's memory hierarchy: this machine's caches as /sys describes them."""
    levels = {lv.name: lv for lv in get_target("x86_avx512").spec.memory.levels}
    caches = []
    for name in (level, next_level):
        spec = levels[name]
        caches.append(simulated_cache(name, int(spec.size_bytes), spec.associativity,
                                      int(spec.line_bytes or 64)))
    return caches[0], caches[1]


def fused_nest(chain: Chain, order: str) -> FusedNest:
    """Split ``order`` into shared, producer and consumer loops (see the module docstring)."""
    if not is_legal(chain, order):
        legal = ", ".join("".join(o) for o in legal_orders(chain))
        raise FusionError(f"order {order!r} is not legal for chain {chain.names}: the "
                          f"producer's reduction k must lie inside the shared loops m and l; "
                          f"pick one of {legal}")
    perm = list(order)
    private = set(chain.private_loops(0))
    first_private = min(perm.index(loop) for loop in private)
    producer_loops = set(chain.ops[0].loops)
    consumer_loops = set(chain.ops[1].loops)
    inner = perm[first_private:]
    return FusedNest(order, tuple(perm[:first_private]),
                     tuple(lp for lp in inner if lp in producer_loops),
                     tuple(lp for lp in inner if lp in consumer_loops and lp not in private))


def predicted(chain: Chain, order: str, tiles: Mapping[str, int]) -> tuple[int, int]:
    """Algorithm 1's DV and MU in bytes for ``tiles``."""
    values = analyze(chain, order).evaluate(tiles)
    return int(values.volume_bytes), int(values.usage_bytes)


# --- the C program -----------------------------------------------------------------------

_PRODUCER = """\
for (int i = 0; i < mb; i++)
  for (int kk = 0; kk < kb; kk++) {
    const float a = A[(m0 + i) * LDA + k0 + kk];
    const float *b = &B[(k0 + kk) * LDB + l0];
    float *c = c_tile[i];
    for (int j = 0; j < lb; j++) c[j] += a * b[j];
  }"""

_CONSUMER = """\
if (l0 == 0)  /* first visit of this E tile */
  for (int i = 0; i < mb; i++)
    for (int q = 0; q < nb; q++) E[(m0 + i) * LDE + n0 + q] = 0.0f;
for (int i = 0; i < mb; i++)
  for (int j = 0; j < lb; j++) {
    const float c = c_tile[i][j];
    const float *d = &D[(l0 + j) * LDD + n0];
    float *e = &E[(m0 + i) * LDE + n0];
    for (int q = 0; q < nb; q++) e[q] += c * d[q];
  }"""

_ZERO_C_TILE = """\
for (int i = 0; i < mb; i++)
  for (int j = 0; j < lb; j++) c_tile[i][j] = 0.0f;"""


def _loop_nest(loops: Sequence[str], body: Sequence[str]) -> list[str]:
    """``body`` inside tiled loops over ``loops`` (outermost first), indented."""
    if not loops:
        return list(body)
    v, V = loops[0], loops[0].upper()
    inner = _loop_nest(loops[1:], body)
    return [f"for (int {v}0 = 0; {v}0 < {V}; {v}0 += T{V}) {{",
            f"  const int {v}b = MIN(T{V}, {V} - {v}0);",
            *("  " + line for line in inner), "}"]


_PROGRAM = """\
/* GEMM chain C = A x B, E = C x D fused in order {order}; tiles {tiles}. Generated. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#define M {M}
#define N {N}
#define K {K}
#define L {L}
#define TM {TM}
#define TN {TN}
#define TK {TK}
#define TL {TL}
#define PAD {pad}
#define LDA (K + PAD)
#define LDB (L + PAD)
#define LDD (N + PAD)
#define LDE (N + PAD)
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define EVICT_BYTES {evict}

/* The measured function: only its D1 misses count. */
__attribute__((noinline)) void fused_kernel(const float *restrict A, const float *restrict B,
                                            const float *restrict D, float *restrict E) {{
  static float c_tile[TM][TL] __attribute__((aligned(64)));  /* the intermediate's tile */
{body}
}}

static float *input(int rows, int cols, int ld, int a, int b, int mod) {{
  float *x = aligned_alloc(64, sizeof(float) * (size_t)rows * ld);
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < ld; j++)  /* padding is NaN: reading it would poison E */
      x[(size_t)i * ld + j] = j < cols ? 0.25f * (float)((a * i + b * j) % mod - mod / 2) : NAN;
  return x;
}}

/* Touch more than any simulated cache holds, so that the kernel starts with the tensors in
   memory, as Algorithm 1 assumes (initialising them left them cached). */
static void evict_caches(void) {{
  static volatile char flush[EVICT_BYTES];
  for (size_t i = 0; i < sizeof flush; i += 64) flush[i] += 1;
}}

int main(int argc, char **argv) {{
  float *A = input(M, K, LDA, 3, 5, 7), *B = input(K, L, LDB, 5, 2, 9);
  float *D = input(L, N, LDD, 7, 3, 5), *E = input(M, N, LDE, 1, 1, 3);
  evict_caches();
  fused_kernel(A, B, D, E);
  if (argc > 1) {{  /* E, unpadded, as raw float32 */
    FILE *out = fopen(argv[1], "wb");
    if (!out) return 2;
    for (int i = 0; i < M; i++) fwrite(&E[(size_t)i * LDE], sizeof(float), N, out);
    fclose(out);
  }}
  return 0;
}}
"""

#: (multiplier of the row index, of the column index, modulus) of each input's values
_INPUT_FORMULAS = {"A": (3, 5, 7), "B": (5, 2, 9), "D": (7, 3, 5)}


def c_program(chain: Chain, order: str, tiles: Mapping[str, int], pad: int = 16,
              evict_bytes: int = 4 << 20) -> str:
    """The C source of the fused nest of ``order`` with ``tiles`` (a ``main`` included);
    ``main`` touches ``evict_bytes`` of scratch memory before the kernel runs."""
    nest = fused_nest(chain, order)
    tiles = check_tiles(chain, tiles)
    if pad < 0:
        raise ValueError(f"padding {pad} must be >= 0 floats per row (16 = one cache line)")
    block = [*_ZERO_C_TILE.splitlines(),
             *_loop_nest(nest.producer, _PRODUCER.splitlines()),
             *_loop_nest(nest.consumer, _CONSUMER.splitlines())]
    indented = "\n".join("  " + line for line in _loop_nest(nest.shared, block))
    extents = {v.upper(): chain.extents[v] for v in LOOPS}
    return _PROGRAM.format(order=order, tiles=_tiles_text(tiles), pad=pad, body=indented,
                           evict=evict_bytes,
                           **extents, **{"T" + v.upper(): tiles[v] for v in LOOPS})


def check_tiles(chain: Chain, tiles: Mapping[str, int]) -> dict[str, int]:
    """``tiles`` checked to give an integer in [1, extent] for each of m, n, k, l."""
    missing = [v for v in LOOPS if v not in tiles]
    if missing or set(tiles) - set(LOOPS):
        raise FusionError(f"tiles {dict(tiles)} must give exactly the loops m, n, k, l of "
                          f"the GEMM chain (missing: {', '.join(missing) or 'none'})")
    for loop in LOOPS:
        tile = tiles[loop]
        if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or \
                not 1 <= tile <= chain.extents[loop]:
            raise FusionError(f"tile {loop}={tiles[loop]!r} must be an integer in "
                              f"[1, {chain.extents[loop]}] (the loop's extent)")
    return {v: int(tiles[v]) for v in LOOPS}


def reference_output(chain: Chain) -> np.ndarray:
    """E as numpy computes it from the inputs the C program builds (float64)."""
    def make(rows: int, cols: int, a: int, b: int, mod: int) -> np.ndarray:
        i, j = np.indices((rows, cols))
        return 0.25 * ((a * i + b * j) % mod - mod // 2)
    ext = chain.extents
    A = make(ext["m"], ext["k"], *_INPUT_FORMULAS["A"])
    B = make(ext["k"], ext["l"], *_INPUT_FORMULAS["B"])
    D = make(ext["l"], ext["n"], *_INPUT_FORMULAS["D"])
    return (A @ B) @ D


def build(source: str, workdir: Path, name: str = "chain") -> Path:
    """Compile ``source`` with gcc into ``workdir``; a failure raises with the command."""
    path = workdir / f"{name}.c"
    path.write_text(source)
    binary = workdir / name
    command = ["gcc", *COMPILE_FLAGS, "-o", str(binary), str(path)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"gcc failed on {path}: {result.stderr.strip()}\n"
                           f"repro: {' '.join(command)}")
    return binary


def read_output(path: Path, chain: Chain) -> np.ndarray:
    return np.fromfile(path, dtype=np.float32).reshape(chain.extents["m"], chain.extents["n"])


# --- cachegrind --------------------------------------------------------------------------

def cachegrind_command(binary: Path, out_file: Path, level: Cache, below: Cache,
                       args: Sequence[str] = ()) -> list[str]:
    return ["valgrind", "--tool=cachegrind", "--cache-sim=yes", f"--D1={level.flag}",
            f"--LL={below.flag}", f"--I1={I1_CACHE}", f"--cachegrind-out-file={out_file}",
            str(binary), *args]


def function_counts(out_text: str, function: str = "fused_kernel") -> dict[str, int]:
    """Event totals (Ir, D1mr, ...) of ``function`` (and its clones) in a cachegrind.out."""
    events: list[str] = []
    totals: dict[str, int] = {}
    inside = False
    for line in out_text.splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
            totals = dict.fromkeys(events, 0)
        elif line.startswith("fn="):
            name = line[3:]
            inside = name == function or name.startswith(function + ".")
        elif inside and line[:1].isdigit():
            counts = line.split()[1:]
            for event, count in zip(events, counts):
                totals[event] += int(count)
    if not events:
        raise RuntimeError("not a cachegrind output file: no 'events:' line")
    return totals


def run_cachegrind(binary: Path, level: Cache, below: Cache,
                   args: Sequence[str] = ()) -> dict[str, int]:
    """The kernel's event counts under cachegrind with ``level`` as D1 and ``below`` as LL."""
    out_file = binary.with_suffix(".cg")
    command = cachegrind_command(binary, out_file, level, below, args)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"cachegrind failed ({result.returncode}): "
                           f"{result.stderr.strip()[-2000:]}\nrepro: {' '.join(command)}")
    return function_counts(out_file.read_text())


def measure(chain: Chain, order: str, tiles: Mapping[str, int], level: Cache, below: Cache,
            workdir: Path, pad: int = 16, source: str = "sample",
            expected: np.ndarray | None = None) -> Measurement:
    """Build, check and measure one tiling: E must equal ``expected`` (numpy)."""
    tiles = check_tiles(chain, tiles)
    name = f"{order}_" + "_".join(f"{v}{tiles[v]}" for v in LOOPS)
    binary = build(c_program(chain, order, tiles, pad, evict_bytes=2 * below.size_bytes),
                   workdir, name)
    output = workdir / f"{name}.E"
    counts = run_cachegrind(binary, level, below, [str(output)])
    reference = reference_output(chain) if expected is None else expected
    result = read_output(output, chain)
    if not np.allclose(result, reference, rtol=1e-5, atol=1e-3):
        worst = np.unravel_index(np.argmax(np.abs(result - reference)), result.shape)
        raise RuntimeError(f"order {order} tiles {_tiles_text(tiles)}: E{list(worst)} = "
                           f"{result[worst]} but numpy gives {reference[worst]}; see {name}.c")
    volume, usage = predicted(chain, order, tiles)
    line = level.line_bytes
    return Measurement(order, tiles, usage, volume,
                       (counts["D1mr"] + counts["D1mw"]) * line,
                       (counts["DLmr"] + counts["DLmw"]) * below.line_bytes, source)


# --- tilings and statistics --------------------------------------------------------------

def sample_tilings(chain: Chain, order: str, capacity_bytes: int, count: int,
                   rng: random.Random, smallest: int = 16) -> list[dict[str, int]]:
    """``count`` distinct power-of-two tilings (each at least ``smallest``) whose MU fits."""
    choices = {v: [t for t in (2 ** e for e in range(12))
                   if smallest <= t <= chain.extents[v]] or [chain.extents[v]] for v in LOOPS}
    movement = analyze(chain, order)
    feasible = []
    for values in itertools.product(*(choices[v] for v in LOOPS)):
        tiles = dict(zip(LOOPS, values))
        if movement.evaluate(tiles).usage_bytes <= capacity_bytes:
            feasible.append(tiles)
    return rng.sample(feasible, min(count, len(feasible)))


def solver_tiling(chain: Chain, order: str, capacity_bytes: int) -> dict[str, int]:
    """The solver's tiles for ``order`` with k, l, n tiles multiples of 16 (whole lines)."""
    lines = LoopConstraint(minimum=16, multiple_of=16)
    solution = solve_order(chain, order, capacity_bytes,
                           constraints={"k": lines, "l": lines, "n": lines})
    return {v: int(solution.tiles[v]) for v in LOOPS}


@dataclass(frozen=True)
class Fit:
    """Agreement of measured with predicted values."""

    count: int
    r2_identity: float  #: 1 - SS(measured - predicted) / SS(measured - mean): fit to y = x
    pearson: float
    slope: float  #: least-squares measured = slope * predicted + intercept
    intercept: float


def agreement(predicted_values: Sequence[float], measured_values: Sequence[float]) -> Fit:
    """R^2 about the line y = x, Pearson's r and the regression line of measured on
    predicted.

    >>> fit = agreement([1.0, 2.0, 3.0, 4.0], [1.1, 1.9, 3.2, 3.9])
    >>> round(fit.r2_identity, 3), round(fit.pearson, 3)
    (0.985, 0.993)
    """
    x = np.asarray(predicted_values, dtype=float)
    y = np.asarray(measured_values, dtype=float)
    if len(x) < 2 or np.ptp(y) == 0 or np.ptp(x) == 0:
        raise ValueError(f"need at least two distinct points to fit, got {len(x)}")
    r2 = 1.0 - float(np.sum((y - x) ** 2) / np.sum((y - y.mean()) ** 2))
    slope, intercept = np.polyfit(x, y, 1)
    return Fit(len(x), r2, float(np.corrcoef(x, y)[0, 1]), float(slope), float(intercept))


def _tiles_text(tiles: Mapping[str, int]) -> str:
    return " ".join(f"{v}={tiles[v]}" for v in LOOPS)


def print_results(results: Sequence[Measurement], capacity: int) -> None:
    header = ["order", "tiles", "MU KiB", "predicted MB", "measured MB", "meas/pred",
              "L2 misses MB"]
    rows = [[r.order, _tiles_text(r.tiles) + (" *" if r.source == "solver" else ""),
             f"{r.usage_bytes / 1024:.1f}", f"{r.predicted_bytes / 1e6:.2f}",
             f"{r.measured_bytes / 1e6:.2f}", f"{r.measured_bytes / r.predicted_bytes:.3f}",
             f"{r.memory_bytes / 1e6:.2f}"] for r in results]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    print(f"(* = the solver's tiles for the order; capacity {capacity // 1024} KiB)")
    groups = {o: [r for r in results if r.order == o] for o in dict.fromkeys(r.order
                                                                           for r in results)}
    groups["all"] = list(results)
    # near the capacity an LRU cache still holds the tiles being replaced (module docstring)
    groups["all, MU <= 3/4"] = [r for r in results if 4 * r.usage_bytes <= 3 * capacity]
    groups["all, MU > 3/4"] = [r for r in results if 4 * r.usage_bytes > 3 * capacity]
    print("\ngroup           points  R^2 (y = x)  Pearson r  r^2     "
          "fit: measured = a*predicted + b")
    for name, group in groups.items():
        if len(group) < 2:
            continue
        fit = agreement([r.predicted_bytes for r in group], [r.measured_bytes for r in group])
        print(f"{name:<15} {fit.count:>6}  {fit.r2_identity:>11.4f}  {fit.pearson:>9.4f}  "
              f"{fit.pearson ** 2:.4f}  a = {fit.slope:.3f}, b = {fit.intercept / 1e6:+.2f} MB")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512, help="M = N = K = L (default 512)")
    parser.add_argument("--orders", default=",".join(DEFAULT_ORDERS),
                        help="comma-separated legal orders, outermost loop first")
    parser.add_argument("--count", type=int, default=40, help="sampled tilings per order")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--pad", type=int, default=16, help="floats of padding per row")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    missing = [tool for tool in ("gcc", "valgrind") if shutil.which(tool) is None]
    if missing:
        print(f"skipped: {' and '.join(missing)} not installed "
              f"(apt-get install {' '.join(missing)})")
        return 0
    chain = gemm_chain(args.size, args.size, args.size, args.size)
    level, below = target_caches()
    orders = [o.strip() for o in args.orders.split(",") if o.strip()]
    rng = random.Random(args.seed)
    jobs: list[tuple[str, dict[str, int], str]] = []
    for order in orders:
        fused_nest(chain, order)  # rejects an illegal order before any work
        jobs += [(order, solver_tiling(chain, order, level.size_bytes), "solver")]
        jobs += [(order, t, "sample")
                 for t in sample_tilings(chain, order, level.size_bytes, args.count, rng)]
    print(f"GEMM chain M=N=K=L={args.size}, fp32; D1 = {level.name} {level.flag}, LL = "
          f"{below.name} {below.flag}; rows padded by {args.pad} floats; {len(jobs)} tilings, "
          f"{args.jobs} at a time")
    expected = reference_output(chain)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="accuracy_cg_") as tmp, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        workdirs = [Path(tmp) / str(index) for index in range(len(jobs))]  # no name clashes
        for workdir in workdirs:
            workdir.mkdir()
        futures = [pool.submit(measure, chain, order, tiles, level, below, workdir, args.pad,
                               source, expected)
                   for (order, tiles, source), workdir in zip(jobs, workdirs)]
        results = [f.result() for f in futures]
    print(f"measured in {time.perf_counter() - started:.0f} s\n")
    print_results(results, level.size_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
