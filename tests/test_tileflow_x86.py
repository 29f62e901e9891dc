"""TileFlow on x86 (issue 17 item 6): bench/tileflow_cachegrind.py's C program of a two-level
tree computes the chain, its predicted L2 traffic matches cachegrind on a small chain, and the
graph-level choice among fused dataflows for two GEMMs sharing an input follows the model."""

from __future__ import annotations

import importlib.util
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tilecraft import ops, te
from tilecraft.dataflow import analyze_movement
from tilecraft.dataflow.graph_plan import (
    apart_tree,
    choose,
    fused_tree,
    pair_chain,
    plan_shared_inputs,
    shared_input_pairs,
)
from tilecraft.fusion import gemm_chain
from tilecraft.graph import Graph
from tilecraft.target.registry import get_target

_SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "tileflow_cachegrind.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("tileflow_cachegrind", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


tcg = _load_script()
X86 = get_target("x86_avx512").spec
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")


@needs_gcc
@pytest.mark.parametrize("extents,outer,inner", [
    ((37, 29, 13, 11), ("nmlk", {"m": 16, "l": 8, "n": 16}), ("mlkn", {"m": 5, "l": 3, "k": 4,
                                                                        "n": 7})),
    ((24, 1, 7, 5), ("mlkn", {"m": 8, "l": 5, "n": 1}), ("lmnk", {"m": 3, "l": 2, "k": 7,
                                                                   "n": 1})),
])
def test_c_program_of_a_two_level_tree_computes_the_chain(extents, outer, inner, tmp_path):
    chain = gemm_chain(*extents)
    tree = tcg.two_level_tree(chain, outer, inner)
    binary = tcg.acg.build(tcg.c_program(tree, evict_bytes=1 << 16), tmp_path, "tree")
    subprocess.run([str(binary), str(tmp_path / "E")], check=True)
    assert np.allclose(tcg.acg.read_output(tmp_path / "E", chain),
                       tcg.acg.reference_output(chain), rtol=1e-5, atol=1e-3)


@needs_gcc
def test_a_loop_that_runs_once_changes_neither_prediction_nor_result(tmp_path):
    chain = gemm_chain(64, 32, 48, 16)
    tree = tcg.two_level_tree(chain, ("mlkn", {"m": 32, "n": 16}),
                              ("mlkn", {"m": 8, "l": 8, "k": 16, "n": 16}))
    # L2 loops m, n; k inside n and l around both at their full extents: each runs once
    kept = tcg.TileNode("L2", (tcg.Loop("l", 16), *tree.root.loops, tcg.Loop("k", 48)),
                        tree.root.child, name="L2")
    with_k = tcg.DataflowTree(chain, kept)
    levels = X86.memory.names
    assert analyze_movement(tree, levels).of_tensor("A", "L2") == 64 * 48
    def moved(t):
        return [(r.op, r.tensor, r.level, r.elements) for r in analyze_movement(t, levels).records]
    assert moved(with_k) == moved(tree)
    binary = tcg.acg.build(tcg.c_program(with_k, evict_bytes=1 << 16), tmp_path, "tree")
    subprocess.run([str(binary), str(tmp_path / "E")], check=True)
    assert np.allclose(tcg.acg.read_output(tmp_path / "E", chain),
                       tcg.acg.reference_output(chain), rtol=1e-5, atol=1e-3)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_predicted_l2_traffic_matches_cachegrind(tmp_path):
    # A is 4 MiB, twice the L2: reloading it per n tile shows in the LL misses
    chain = gemm_chain(4096, 64, 256, 16)
    level, below = tcg.acg.target_caches("L1", "L2")
    expected = tcg.acg.reference_output(chain)
    trees = tcg.sample_trees(chain, 2, random.Random(5))
    assert trees
    for index, tree in enumerate(trees):
        workdir = tmp_path / str(index)
        workdir.mkdir()
        measured = tcg.measure(tree, level, below, workdir, expected)
        predicted, _ = tcg.predicted(tree)
        assert measured["L2"] == pytest.approx(predicted["L2"], rel=0.1), str(tree)


def _two_gemms(m, k, n, transposed=False):
    X = te.placeholder((m, k), name="X")
    A = ops.matmul(X, te.placeholder((k, n), name="W1"), name="A")
    if transposed:  # B = X^T W2: X's rows are B's reduction
        W2 = te.placeholder((m, n), name="W2")
        r = te.reduce_axis(m, name="r")
        B = te.compute((k, n), lambda a, b: te.sum(X[r, a] * W2[r, b], axis=r), name="B")
    else:
        B = ops.matmul(X, te.placeholder((k, n), name="W2"), name="B")
    return Graph.from_outputs([A, B])


def test_shared_input_pairs_skip_dependent_computes():
    X = te.placeholder((16, 16), name="X")
    A = ops.matmul(X, te.placeholder((16, 16), name="W1"), name="A")
    B = ops.matmul(X, A, name="B")  # reads X and A: depends on A
    assert shared_input_pairs(Graph.from_outputs([B])) == []
    pairs = shared_input_pairs(_two_gemms(16, 8, 4))
    assert [(a.name, b.name, x.name) for a, b, x in pairs] == [("A", "B", "X")]


def test_fused_when_loading_the_shared_input_once_saves_traffic():
    graph = _two_gemms(1024, 1024, 64)
    (choice,) = plan_shared_inputs(graph, X86)
    assert choice.fused and choice.level == "L2" and "X loaded once" in choice.reason
    fused, apart = choice.traffic(choice.fused_cost), choice.traffic(choice.apart_cost)
    assert fused < apart
    # the model's own count: fused moves X once, apart twice (both trees as chosen)
    assert choice.fused_cost.movement.per_tensor("L2")["X"] >= 1024 * 1024
    assert choice.apart_cost.movement.per_tensor("L2")["X"] >= 2 * 1024 * 1024
    assert choice.fused_cost.feasible and choice.apart_cost.feasible


def test_apart_when_the_fused_tree_must_store_partial_sums():
    # X is A's rows and B's reduction: tiling X for both hands one of them partial sums
    graph = _two_gemms(1024, 1024, 1024, transposed=True)
    (choice,) = plan_shared_inputs(graph, X86)
    assert not choice.fused
    assert choice.traffic(choice.fused_cost) > choice.traffic(choice.apart_cost)
    assert "apart" in str(choice) and "B between DRAM and L2" in choice.reason


def test_choice_compares_the_trees_it_reports():
    graph = _two_gemms(96, 40, 24)
    chain = pair_chain(graph, *_names(graph))
    choice = choose(chain, "X", X86)
    whole = {lp: e for lp, e in chain.extents.items()}
    fused = fused_tree(chain, ["i", "k"], "L2", whole)
    apart = apart_tree(chain, "L2", [whole, whole], [["i", "j1", "k"], ["i", "j2", "k"]])
    levels = X86.memory.names
    # whole tiles: fused loads X once, apart twice; the search can only do as well
    assert analyze_movement(fused, levels).of_tensor("X", "L2") == 96 * 40
    assert analyze_movement(apart, levels).of_tensor("X", "L2") == 2 * 96 * 40
    assert choice.fused


def _names(graph):
    (pair,) = shared_input_pairs(graph)
    return pair[0], pair[1], pair[2].name


def test_compile_report_records_the_choice_and_its_traffic():
    import tilecraft as tc
    X = te.placeholder((48, 40), name="X")
    A = ops.matmul(X, te.placeholder((40, 24), name="W1"), name="A")
    B = ops.matmul(X, te.placeholder((40, 24), name="W2"), name="B")
    exe = tc.compile([A, B], target="x86_avx512")
    notes = [n for n in exe.report.notes if n.startswith("TileFlow: ")]
    assert len(notes) == 1 and "A + B (share X): fused" in notes[0]
    assert "B between DRAM and L2 fused vs" in notes[0]
    rng = np.random.default_rng(0)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((48, 40), (40, 24),
                                                                     (40, 24)))
    a, b = exe(x, w1, w2)  # the decision is reported; the kernels still compute the graph
    assert np.allclose(a, x @ w1, atol=1e-4) and np.allclose(b, x @ w2, atol=1e-4)


def _attention_with_residual(batch, seq, dim):
    from tilecraft.fusion.examples import attention_tensors
    _, out, graph = attention_tensors(batch, seq, dim)
    (q,) = [t for t in graph.dag.nodes if getattr(t, "name", "") == "Q"]
    return Graph.from_outputs([ops.add(out, q, name="R")])


def test_attention_residual_fused_keeps_the_result_in_the_level():
    from tilecraft.dataflow.graph_plan import plan_residuals, residual_sites
    graph = _attention_with_residual(3, 96, 16)
    (site,) = residual_sites(graph)
    assert [t.name for t in site] == ["S", "O", "R", "Q"]
    (choice,) = plan_residuals(graph, X86)
    assert choice.fused and "O stays in L2" in choice.reason
    fused = choice.fused_cost.movement.per_tensor("L2")
    apart = choice.apart_cost.movement.per_tensor("L2")
    assert "O" not in fused and apart["O"] == 2 * 3 * 96 * 16  # stored, then read back
    assert choice.traffic(choice.fused_cost) < choice.traffic(choice.apart_cost)


def test_residual_of_a_chain_that_does_not_fit_is_left_out():
    from tilecraft.dataflow.graph_plan import plan_residuals
    from tilecraft.target.spec import load_spec
    tiny = X86.model_dump()
    for level in tiny["memory"]["levels"]:
        if level["size_bytes"] is not None:
            level["size_bytes"] = (level["associativity"] or 1) * (level["line_bytes"] or 64)
    assert plan_residuals(_attention_with_residual(1, 40, 8), load_spec(tiny)) == ()


def test_compile_report_records_the_residual_choice():
    import tilecraft as tc
    graph = _attention_with_residual(2, 24, 8)
    exe = tc.compile(list(graph.outputs), target="x86_avx512")
    notes = [n for n in exe.report.notes if n.startswith("TileFlow: ")]
    assert notes == [n for n in notes if "S -> O + R (residual Q): fused" in n] and notes
