"""TileFlow's study (thesis §3.6.5, issue 17 item 4): the Table 3.8 dataflows and the searched
TileFlow dataflow on the Edge accelerator (Table 3.5 attention shapes) and the Cloud accelerator
(Table 3.6 conv chains), each dataflow searched in its own space, normalised to Layerwise; and
the search's convergence.

    .venv/bin/python bench/bench_tileflow.py [--quick] [--seed N] [--budget N] [--structures N]
        [--fraction F] [--cap N]

Needs the plugin tilecraft-spatial-accel (`make setup` installs every plugin). All figures
are the model's (tilecraft.dataflow), not measurements.

How the Table 3.8 dataflows are written (the attention workload is the chain S = softmax(Q K^T)
-> O = S V with the softmax computed inside S's block):
- Layerwise: each operator its own nest, the intermediate through DRAM, and the softmax as
  its own layer: the scores go to DRAM and back once more (added as that layer's DRAM traffic).
- Uni-pipe: Q K^T and softmax fused (pipelined inside S's block), batch-head and sequence
  loops untiled, then S V as a separate layer.
- FLAT-HGran / FLAT-RGran: Q K^T and softmax fused, tiles searched over the batch-head loop
  (HGran) and also the sequence loop (RGran); S V a separate layer.
- Chimera: the whole chain fused (Seq) with Chimera's analytical order and tiles.
- TileFlow: GA over order / binding / fusion level, MCTS over tiles, warm-started from Chimera.
Conv chains: Layerwise; Fused-Layer (fused, rows and columns tiled); ISOS (fused, rows
tiled); TileFlow (searched).

Searches respect containment: Uni-pipe's tiles are points of FLAT-HGran's space, HGran's of
RGran's, RGran's of Layerwise's (the same tiles, plus the softmax layer), ISOS's of
Fused-Layer's, and all of them structures of TileFlow's space; each larger space is warm-started
from the best of the spaces it contains, so its result is at least as good by construction. Each
space gets a budget proportional to its size (--fraction of its points, at least 60 or all of
them, at most --cap; --budget N: N points everywhere instead); TileFlow's tile searches too, over
--structures structures. A tile search whose space is larger than its budget runs again from its
best (a fresh seed, twice the points), each round ending in a descent to a local optimum
(single-loop moves), until a round gains less than 1% (--rounds at most; TileFlow: the whole GA
again, same budgets). Layerwise on C3: one MCTS round of 600 points 18080 cycles, one of 2400
10197, four rounds 15680, one round + descent 8112, four rounds + descents 5765.

Measured (default run, 599 s, Intel Xeon family 6 model 167, 2 shared cores; geomean speed-up
over Layerwise, thesis in brackets): Edge G1-G12 Uni-pipe 2.16 (1.62), FLAT-HGran 2.16 (3.59),
FLAT-RGran 2.16 (2.89), Chimera 1.55 (2.91), TileFlow 3.79 (6.65); DRAM 0.48 / 0.48 / 0.48 /
0.24 / 0.20. The three FLAT-style dataflows tie: their best tiles are whole per-core slices
(a head's scores fit the 4 MB L1), so granularity never binds, and what they gain is the softmax
layer's round trip through DRAM. Chimera's tiles are solved for DRAM volume, not for the PE
array. Cloud C1-C8: Fused-Layer 1.57 (1.01), ISOS 1.56, TileFlow 1.57 (1.59); DRAM 0.70 (0.27).
Layerwise is DRAM-bound in the model and fusing keeps the intermediate on chip. Fused-Layer's
point (channels whole, rows and columns tiled) already moves each tensor once, and TileFlow's
search finds nothing faster.
"""

from __future__ import annotations

import argparse
import math
import platform
import time

from tilecraft import ops, te
from tilecraft.dataflow import ScopeKind, TreeCost
from tilecraft.dataflow.chain_space import ChainSpace
from tilecraft.dataflow.search import proportional_budget, search_dataflow, search_tiles
from tilecraft.fusion import chain_from_computes
from tilecraft.graph import Graph

try:
    from tilecraft_spatial_accel import make_cloud, make_edge
except ImportError:  # pragma: no cover - the message is the point
    raise SystemExit("bench_tileflow needs the plugin tilecraft-spatial-accel: run `make setup` "
                     "(or pip install -e plugins/spatial_accel)") from None

#: Table 3.5: batch (x heads), M, N = K, L
ATTENTION = {"G1 Bert-S": (8, 512, 64, 512), "G2 Bert-B": (12, 512, 64, 512),
             "G3 Bert-L": (16, 512, 64, 512), "G4 ViT/14-B": (12, 256, 64, 256),
             "G5 ViT/14-L": (16, 256, 64, 256), "G6 ViT/14-H": (16, 256, 80, 256),
             "G7 ViT/16-B": (12, 208, 64, 208), "G8 ViT/16-L": (16, 208, 64, 208),
             "G9 ViT/16-H": (16, 208, 80, 208), "G10 MLP-M": (1, 512, 64, 256),
             "G11 MLP-M": (1, 768, 64, 384), "G12 MLP-M": (1, 1024, 64, 512)}
#: Table 3.6: IC, H(=W), OC1, OC2, stride1, stride2, k1, k2
CONV = {"C1": (64, 112, 192, 128, 2, 1, 3, 1), "C2": (32, 147, 64, 80, 2, 1, 3, 1),
        "C3": (64, 56, 128, 64, 1, 1, 3, 1), "C4": (128, 28, 256, 128, 1, 1, 3, 1),
        "C5": (16, 227, 64, 16, 4, 1, 3, 1), "C6": (64, 56, 64, 64, 1, 1, 1, 3),
        "C7": (64, 56, 64, 64, 1, 1, 1, 1), "C8": (256, 56, 256, 64, 1, 1, 1, 1)}
DTYPE = "float16"


def attention(batch, m, head, l):  # noqa: E741 - the thesis's name
    """``S = Q K^T`` (M x L), ``O = softmax(S) V``: Table 3.5's chain, M and L apart."""
    q = te.placeholder((batch, m, head), DTYPE, name="Q")
    k = te.placeholder((batch, l, head), DTYPE, name="K")
    v = te.placeholder((batch, l, head), DTYPE, name="V")
    scores = ops.batch_matmul(q, k, transpose_b=True, name="S")
    probs = ops.softmax(ops.scale(scores, 1.0 / head ** 0.5, name="scaled"), name="P")
    out = ops.batch_matmul(probs, v, name="O")
    return chain_from_computes([scores, out], Graph.from_outputs([out]),
                               loop_names={"i": "m", "j": "n", "k": "l", "k1": "k"})


def conv_chain(ic, hw, oc1, oc2, st1, st2, k1, k2):
    x = te.placeholder((1, ic, hw, hw), DTYPE, name="x")
    w1 = te.placeholder((oc1, ic, k1, k1), DTYPE, name="w1")
    w2 = te.placeholder((oc2, oc1, k2, k2), DTYPE, name="w2")
    first = ops.conv2d(x, w1, stride=st1, padding=k1 // 2, name="conv1")
    second = ops.conv2d(ops.relu(first, name="act"), w2, stride=st2, padding=k2 // 2,
                        name="conv2")
    return chain_from_computes([first, second], Graph.from_outputs([second]))


class Outcome:
    """One dataflow on one shape: the model's figures, plus an extra DRAM layer if any."""

    def __init__(self, cost: TreeCost | None, spec, extra_dram_bytes: int = 0):
        self.cost = cost
        if cost is None or not cost.feasible:
            self.cycles = math.inf
            self.dram = self.energy = self.footprint = math.inf
            return
        outer = spec.memory.names[0]
        dram = sum(r.bytes for r in cost.movement.records if r.source == outer)
        bandwidth = spec.memory.levels[0].bandwidth_bytes_per_cycle
        per_byte = sum(level.access_energy_pj_per_byte for level in spec.memory.levels[::2])
        self.cycles = cost.cycles + extra_dram_bytes / bandwidth
        self.dram = dram + extra_dram_bytes
        self.energy = cost.energy_pj + extra_dram_bytes * per_byte
        self.footprint = cost.footprint_bytes.get(spec.memory.names[-1], 0)
        self.utilization = cost.utilization


class Budget:
    """Points per search: ``fixed`` everywhere, or proportional to the space's size."""

    def __init__(self, fixed: int | None, fraction: float, cap: int, rounds: int = 1):
        self.fixed, self.fraction, self.cap, self.rounds = fixed, fraction, cap, rounds

    def of(self, space: ChainSpace) -> int:
        if self.fixed is not None:
            return self.fixed
        return proportional_budget(space.tile_space().size, self.fraction, cap=self.cap)


def searched(space: ChainSpace, budget: Budget, seed: int, warm=None):
    """The best tree of ``space``'s one structure (cost, structure, tiles), warm-started from
    ``warm``: the (cost, structure, tiles) of a space this one contains."""
    structure = space.structure((0, 0, 0))
    starts = [warm[2]] if warm is not None and warm[2] is not None else []
    best, tiles = search_tiles(space, structure, budget.of(space), seed, warm=starts,
                               rounds=budget.rounds, refine=True)
    if tiles is None or math.isinf(best):
        return None, structure, None
    return space.cost(space.tree(structure, tiles)), structure, tiles


def _tileflow(chain, spec, budget: Budget, structures: int, seed: int, contained):
    space = ChainSpace(chain, spec)
    warm = [(structure, tiles) for _, structure, tiles in contained if tiles is not None]
    tiles = None if budget.fixed is None else budget.fixed
    found = search_dataflow(space, structures=structures, tiles_per_structure=tiles
                            if tiles is not None else budget.of(space), seed=seed, warm=warm,
                            rounds=budget.rounds, refine=True)
    return space, found


def attention_dataflows(chain, spec, budget: Budget, structures: int, seed: int):
    b, m = "b", "m"
    full = chain.extents
    scores = full["b"] * full["m"] * full["l"] * chain.op("S").access("S").dtype.bytes
    layerwise = dict(levels=[None], scopes=[ScopeKind.SEQ])
    # each space contains the one before it: Uni-pipe c HGran c RGran = Layerwise's tiles
    spaces = {
        "Uni-pipe": (ChainSpace(chain, spec, fixed_tiles={b: full[b], m: full[m]},
                                **layerwise), 0),
        "FLAT-HGran": (ChainSpace(chain, spec, tiled=[b, "n", "k"], **layerwise), 0),
        "FLAT-RGran": (ChainSpace(chain, spec, tiled=[b, m, "n", "k"], **layerwise), 0),
        "Layerwise": (ChainSpace(chain, spec, **layerwise), 2 * scores),
    }
    found, previous = {}, None
    for name, (space, _) in spaces.items():
        found[name] = previous = searched(space, budget, seed, previous)
    results = {name: Outcome(found[name][0], spec, extra)
               for name, (_, extra) in spaces.items()}
    space, tileflow = _tileflow(chain, spec, budget, structures, seed, [found["FLAT-RGran"]])
    structure, tiles = space.chimera_start()
    results["Chimera"] = Outcome(space.cost(space.tree(structure, tiles)), spec)
    results["TileFlow"] = Outcome(tileflow.best_cost, spec)
    return results, tileflow


def conv_dataflows(chain, spec, budget: Budget, structures: int, seed: int):
    inner = spec.memory.names[-1]
    isos = ChainSpace(chain, spec, levels=[inner], scopes=[ScopeKind.SEQ], tiled=["h"])
    fused = ChainSpace(chain, spec, levels=[inner], scopes=[ScopeKind.SEQ], tiled=["h", "w"])
    layerwise = ChainSpace(chain, spec, levels=[None], scopes=[ScopeKind.SEQ])
    found = {"Layerwise": searched(layerwise, budget, seed)}
    found["ISOS"] = searched(isos, budget, seed)
    found["Fused-Layer"] = searched(fused, budget, seed, found["ISOS"])  # contains ISOS
    results = {name: Outcome(found[name][0], spec)
               for name in ("Layerwise", "Fused-Layer", "ISOS")}
    _, tileflow = _tileflow(chain, spec, budget, structures, seed,
                            [found["Fused-Layer"], found["Layerwise"]])
    results["TileFlow"] = Outcome(tileflow.best_cost, spec)
    return results, tileflow


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def geomean(values):
    values = [v for v in values if 0 < v < math.inf]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def table(title: str, rows: dict, names: list[str]) -> None:
    print(f"\n{title}")
    print(f"{'shape':<13}" + "".join(f"{n:>12}" for n in names))
    for metric, key, better in (("speed-up", "cycles", "inverse"), ("DRAM", "dram", ""),
                                ("energy", "energy", ""), ("L1 foot", "footprint", "")):
        print(f"-- {metric} vs Layerwise" + (" (x)" if better else " (ratio)"))
        per = {n: [] for n in names}
        for shape, results in rows.items():
            base = getattr(results["Layerwise"], key)
            line = f"{shape:<13}"
            for n in names:
                value = getattr(results[n], key)
                ratio = (base / value if better else value / base) if base and value else 0
                per[n].append(ratio)
                line += f"{ratio:>12.2f}" if math.isfinite(ratio) and ratio else f"{'n/a':>12}"
            if key == "cycles":
                print(line)
        print(f"{'geomean':<13}" + "".join(f"{geomean(per[n]):>12.2f}" for n in names))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="three shapes each, small budgets")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int,
                        help="tile points per search, whatever the space's size")
    parser.add_argument("--fraction", type=float, default=0.25,
                        help="else: this share of a space's points (at least 60, or all)")
    parser.add_argument("--cap", type=int, help="and at most this many (600; quick 120)")
    parser.add_argument("--structures", type=int, help="TileFlow's structures (12; quick 6)")
    parser.add_argument("--rounds", type=int, default=4,
                        help="search again from the best until a round gains < 1%% (at most)")
    parser.add_argument("--only", choices=["edge", "cloud"], help="one of the two studies")
    args = parser.parse_args()
    cap, structures = (120, 6) if args.quick else (600, 12)
    budget = Budget(args.budget, args.fraction, args.cap or cap, args.rounds)
    structures = args.structures or structures
    shapes = dict(list(ATTENTION.items())[:3]) if args.quick else ATTENTION
    convs = {k: CONV[k] for k in ("C3", "C7", "C8")} if args.quick else CONV
    per = f"{budget.fixed} tile points per search" if budget.fixed else \
        f"{budget.fraction:g} of each space's tile points (60 to {budget.cap})"
    per += f", rounds until < 1% gain (at most {budget.rounds})"
    print(f"CPU: {cpu_name()}; model figures; budgets: {per}; TileFlow {structures} "
          "structures; larger spaces warm-started from the best of those they contain")
    edge, cloud = make_edge().spec, make_cloud().spec

    started = time.perf_counter()
    if args.only != "cloud":
        edge_study(shapes, edge, budget, structures, args.seed)
    if args.only != "edge":
        cloud_study(convs, cloud, budget, structures, args.seed)
    print(f"\n{time.perf_counter() - started:.0f} s in all")


def edge_study(shapes, edge, budget: Budget, structures: int, seed: int) -> None:
    rows, curves = {}, {}
    for shape, params in shapes.items():
        rows[shape], curves[shape] = attention_dataflows(attention(*params), edge, budget,
                                                         structures, seed)
    names = ["Layerwise", "Uni-pipe", "FLAT-HGran", "FLAT-RGran", "Chimera", "TileFlow"]
    table("Edge, self-attention (Table 3.5)", rows, names)
    print("thesis (Fig. 3.15): speed-up Uni-pipe 1.62, FLAT-HGran 3.59, FLAT-RGran 2.89, "
          "Chimera 2.91, TileFlow 6.65")
    first = next(iter(curves))
    found = curves[first]
    print(f"\nconvergence of TileFlow's search on {first} (Edge): best cycles after n trees")
    checkpoints = sorted({1, 10, 50, 100, 200, len(found.curve) // 2, len(found.curve)})
    for n in checkpoints:
        if 0 < n <= len(found.curve):
            print(f"  {n:>5} trees  {found.curve[n - 1] * edge.compute.frequency_hz:14.4g}")
    print(f"  {found.seconds_per_evaluation * 1e3:.2f} ms per tree evaluated, "
          f"{found.wall_seconds:.1f} s in all (thesis: 3.2-6.4 min per shape)")
    print(f"  TileFlow's tree on {first}:\n{found.best_tree}")


def cloud_study(convs, cloud, budget: Budget, structures: int, seed: int) -> None:
    conv_rows = {}
    for shape, params in convs.items():
        conv_rows[shape], _ = conv_dataflows(conv_chain(*params), cloud, budget,
                                             structures, seed)
    table("Cloud, conv chains (Table 3.6)", conv_rows,
          ["Layerwise", "Fused-Layer", "ISOS", "TileFlow"])
    print("thesis (Fig. 3.17): Fused-Layer 1.01x (DRAM -73%), TileFlow 1.59x over Layerwise")


if __name__ == "__main__":
    main()
