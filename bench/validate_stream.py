"""A fused GEMM chain in TileFlow and in Stream (layer-fused multi-core scheduling), issue 17
item 5: what Stream's model allows, and a short comparison.

Stream (``stream-dse``) splits each layer into computation nodes (CNs) along "hint loops" (here
the rows, OY = M: one CN per row and layer, the layer-fused schedule; no hint: one CN per layer,
layer by layer), evaluates every CN with ZigZag, allocates CNs to cores and schedules them,
keeping a producer's outputs on chip while they fit. It does not take a tile tree: the fused
granularity is the CN, each CN's mapping is ZigZag's own search, and a CN's reuse of data left
on chip by the CN before is the scheduler's, so only the *schedule-level* figures compare:
DRAM traffic and latency, fused rows vs layer by layer.

Stream's newest release on the package index (0.0.8) imports ``zigzag.classes`` (ZigZag < 3)
and its ``api.get_hardware_performance_stream`` omits a required argument; it runs in its own
environment::

    python -m venv /tmp/streamvenv
    /tmp/streamvenv/bin/pip install stream-dse==0.0.8 "zigzag-dse<3" pandas plotly
    /tmp/streamvenv/bin/python bench/validate_stream.py --stream > s.json
    .venv/bin/python bench/validate_stream.py --stream-json s.json

The first command drives Stream's stages directly (GA of 4 individuals x 1 generation: one core,
nothing to allocate) on its single test core (16 x 16 PEs, 128 KB activation + 128 KB weight
SRAM, DRAM at 16 bit/cycle, 1000 pJ per 16-bit DRAM word); the second evaluates TileFlow trees
on a spec of that core (one 256 KB L1, DRAM 2 B/cycle, 256 PEs unrolling K and C 16 x 16 as the
core does) and prints both. Chain C = A x B, E = C x D, M=256, K=64, L=512, N=64, int8.

Measured (this session): DRAM bytes (Stream: CN off-chip energy / 500 pJ per byte; E's final
write is booked apart by Stream, left out of both) fused rows 83,857 Stream vs 81,920 TileFlow
(A + B + D once; C never leaves), layer by layer 346,001 vs 344,064 (C written and read back):
within 2.4% and 0.6%. Latency: layer by layer 155,137 vs 147,456 cycles (TileFlow 0.95x: both
DRAM bound); fused rows 1,341,503 vs 65,536: Stream schedules 512 one-row CNs one after another
and charges each ZigZag's single-layer latency, first loads of its operands into the core's
inner memories included, where TileFlow's tree keeps B and D in L1 across rows and overlaps
(double-buffered) transfers with compute. We did not trace Stream's per-CN breakdown further.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

M, K, L, N = 256, 64, 512, 64
SCHEDULES = {"fused rows": [("OY", "all")], "layer by layer": []}
DRAM_PJ_PER_BYTE = 500.0  # Stream's test off-chip core: 1000 pJ per 16-bit word


def stream_workload() -> dict:
    conv = "O[b][k][oy][ox]+=W[k][c][fy][fx]*I[b][c][iy][ix]"
    common = {"operator_type": "layer_on_core0", "equation": conv,
              "dimension_relations": ["ix=1*ox+1*fx", "iy=1*oy+1*fy"],
              "operand_precision": {"O": 16, "O_final": 8, "W": 8, "I": 8},
              "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"},
              "padding": {"IY": (0, 0), "IX": (0, 0)}}
    return {
        0: {**common, "loop_dim_size": {"B": 1, "K": L, "C": K, "OY": M, "OX": 1, "FY": 1,
                                        "FX": 1},
            "operand_source": {"W": [], "I": []}, "constant_operands": ["W", "I"]},
        1: {**common, "loop_dim_size": {"B": 1, "K": N, "C": L, "OY": M, "OX": 1, "FY": 1,
                                        "FX": 1},
            "operand_source": {"W": [], "I": [0]}, "constant_operands": ["W"],
            "operand_source_dimension_mapping": {"I": {"IX": "OX", "IY": "OY", "C": "K"}}},
    }


def run_stream() -> dict[str, dict[str, float]]:
    import logging

    from stream.classes.stages import (
        GenerateCNWorkloadHybridStage,
        InterCoreMappingStage,
        IntraCoreMappingStage,
        UserDefinedModelParserStage,
    )
    from zigzag.classes.stages import AcceleratorParserStage, MainStage
    logging.disable(logging.CRITICAL)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, tmp)
        for index, (name, hint) in enumerate(SCHEDULES.items()):
            # a module per run: Stream turns the workload dict it imports into its nodes
            (Path(tmp) / f"chain_workload_{index}.py").write_text(
                f"workload = {stream_workload()!r}\n")
            started = time.perf_counter()
            stage = MainStage(
                [AcceleratorParserStage, UserDefinedModelParserStage,
                 GenerateCNWorkloadHybridStage, IntraCoreMappingStage, InterCoreMappingStage],
                accelerator="stream.inputs.testing.hardware.single_testing_core_offchip",
                workload_path=f"chain_workload_{index}",
                mapping_path="stream.inputs.testing.mapping.testing_mapping",
                loma_lpf_limit=6, nb_ga_individuals=4, nb_ga_generations=1,
                node_hw_performances_path=f"{tmp}/{len(results)}.pickle", plot_hof=False,
                plot_file_name=False, plot_full_schedule=False, plot_data_transfer=False,
                cn_define_mode=1, hint_loops=hint, scheduler_candidate_selection="memory",
                operands_to_prefetch=[])
            scme, _ = stage.run()[0]
            results[name] = {"dram_bytes": scme.total_cn_offchip_memory_energy / DRAM_PJ_PER_BYTE,
                             "cycles": float(scme.latency),
                             "seconds": time.perf_counter() - started}
    return results


def run_tileflow() -> dict[str, dict[str, float]]:
    from tilecraft.dataflow import (
        DataflowTree,
        Loop,
        LoopKind,
        OpNode,
        ScopeKind,
        ScopeNode,
        TileNode,
        analyze_tree,
    )
    from tilecraft.fusion import gemm_chain
    from tilecraft.target.spec import load_spec
    spec = load_spec({
        "name": "stream_test_core", "api_version": 1, "version": "0.1",
        "memory": {"levels": [
            {"name": "DRAM", "size_bytes": None, "bandwidth_bytes_per_cycle": 2, "kind": "dram",
             "access_energy_pj_per_byte": DRAM_PJ_PER_BYTE},
            {"name": "L1", "size_bytes": 256 * 1024, "bandwidth_bytes_per_cycle": 64,
             "kind": "scratchpad", "access_energy_pj_per_byte": 3.0}]},
        "compute": {"cores": 1, "frequency_hz": 1e9, "vector_bits": 0,
                    "processing_elements": 256, "mac_energy_pj": 0.5},
        "primitives": ["split"], "loop_kinds": ["serial"], "evaluation": "estimate",
        "capabilities": {"models_performance": True}})
    chain = gemm_chain(M, N, K, L, dtype="int8")

    def leaf(op: str, out: str, red: str, out_extent: int, red_extent: int) -> TileNode:
        return TileNode("L1", (Loop(out, out_extent // 16, LoopKind.SPATIAL),
                               Loop(red, red_extent // 16, LoopKind.SPATIAL)), OpNode(op), name=op)

    c_leaf, e_leaf = leaf("C", "l", "k", L, K), leaf("E", "n", "l", N, L)
    trees = {
        "fused rows": DataflowTree(chain, TileNode("L1", (Loop("m", 1),), ScopeNode(
            ScopeKind.SEQ, (c_leaf, e_leaf)), name="rows")),
        "layer by layer": DataflowTree(chain, ScopeNode(ScopeKind.SEQ, (
            TileNode("L1", (), c_leaf, name="C0"), TileNode("L1", (), e_leaf, name="E0")))),
    }
    results = {}
    for name, tree in trees.items():
        cost = analyze_tree(tree, spec).check()
        moved = cost.movement.per_tensor("L1")
        results[name] = {"dram_bytes": float(sum(b * 1 for t, b in moved.items() if t != "E")),
                         "cycles": cost.cycles}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", action="store_true", help="run Stream, print JSON")
    parser.add_argument("--stream-json", type=Path, help="Stream's figures from --stream")
    args = parser.parse_args(argv)
    if args.stream:
        print(json.dumps(run_stream(), indent=1))
        return 0
    ours = run_tileflow()
    theirs = json.loads(args.stream_json.read_text()) if args.stream_json else None
    print(f"GEMM chain M={M} K={K} L={L} N={N} int8 on Stream's single test core "
          "(DRAM bytes without E's final write; cycles)")
    print(f"{'schedule':16} {'TileFlow B':>12} {'Stream B':>12} {'S/TF':>7} "
          f"{'TileFlow cyc':>13} {'Stream cyc':>12} {'S/TF':>7}")
    for name, row in ours.items():
        other = theirs[name] if theirs else None
        cells = [f"{row['dram_bytes']:>12,.0f}"]
        ratio = other["dram_bytes"] / row["dram_bytes"] if other else 0.0
        cells.append(f"{other['dram_bytes']:>12,.0f} {ratio:>7.3f}" if other
                     else f"{'-':>12} {'-':>7}")
        cells.append(f"{row['cycles']:>13,.0f}")
        cells.append(f"{other['cycles']:>12,.0f} {other['cycles'] / row['cycles']:>7.3f}"
                     if other else f"{'-':>12} {'-':>7}")
        print(f"{name:16} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
