"""The fusion planner: chains, memory-bound epilogues and prologues (Eq. 4.10), fallbacks."""

from __future__ import annotations

import networkx as nx
import pytest

from tilecraft import ops, te
from tilecraft.fusion import (
    Action,
    FusionError,
    GroupKind,
    LoopConstraint,
    PeakFigures,
    fusion_benefit,
    plan_fusion,
)
from tilecraft.fusion.examples import attention_tensors, conv_chain_tensors
from tilecraft.graph import Graph
from tilecraft.target.registry import get_target

PEAKS = PeakFigures(bandwidth_bytes_per_s=38e9, flops_per_s=500e9, launch_overhead_s=2e-6)


@pytest.fixture(scope="module")
def x86():
    return get_target("x86_avx512").spec


def check_partition(plan, graph: Graph) -> None:
    """Every compute is in exactly one group and the groups can run in some order."""
    names = [c for g in plan.groups for c in g.computes]
    assert sorted(names) == sorted(t.name for t in graph.computes)
    assert len(names) == len(set(names))
    owner = {c: g.index for g in plan.groups for c in g.computes}
    quotient = nx.DiGraph()
    quotient.add_nodes_from(g.index for g in plan.groups)
    for producer, consumer in graph.dag.edges:
        if not producer.is_placeholder and owner[producer.name] != owner[consumer.name]:
            quotient.add_edge(owner[producer.name], owner[consumer.name])
    assert nx.is_directed_acyclic_graph(quotient)


def gemm_softmax_gemm(m=256, l=128, k=64, n=64):  # noqa: E741
    a = te.placeholder((m, k), name="a")
    b = te.placeholder((k, l), name="b")
    d = te.placeholder((l, n), name="d")
    scores = ops.matmul(a, b, name="scores")
    probs = ops.softmax(scores, name="probs")
    return Graph.from_outputs([ops.matmul(probs, d, name="out")])


def test_gemm_softmax_gemm_is_one_fused_chain():
    graph = gemm_softmax_gemm()
    plan = plan_fusion(graph, capacity_bytes=128 * 1024, peaks=PEAKS)
    check_partition(plan, graph)
    (group,) = plan.groups
    assert group.kind is GroupKind.CHAIN and group.anchors == ("scores", "out")
    assert group.computes == ("scores", "probs_max", "probs_sub", "probs_exp", "probs_sum",
                              "probs", "out")
    decision = plan.decision("scores -> out")
    assert decision.action is Action.FUSE_CHAIN and "fused vs" in decision.reason
    chain = group.chain
    assert chain.loop("k").full_extent  # softmax's axis: GEMM2's reduction stays whole
    assert group.solution.tiles["k"] == 128
    assert group.solution.level.usage_bytes <= 128 * 1024
    assert plan.decision("probs_exp").action is Action.INTO_PRODUCER


def test_gemm_relu_gemm_with_bias_and_epilogue():
    x = te.placeholder((128, 96), name="x")
    w1 = te.placeholder((192, 96), name="w1")
    b1 = te.placeholder((192,), name="b1")
    w2 = te.placeholder((64, 192), name="w2")
    hidden = ops.relu(ops.dense(x, w1, b1, name="fc1"), name="act")
    out = ops.relu(ops.dense(hidden, w2, name="fc2"), name="out")
    graph = Graph.from_outputs([out])
    plan = plan_fusion(graph, capacity_bytes=96 * 1024, peaks=PEAKS)
    check_partition(plan, graph)
    (group,) = plan.groups
    assert group.computes == ("fc1_matmul", "fc1", "act", "fc2", "out")
    chain = group.chain
    bias = next(a for a in chain.ops[0].accesses if a.tensor == "b1")
    assert bias.io and [str(i) for i in bias.indices] == ["k"]
    out_decision = plan.decision("out")
    assert out_decision.action is Action.INTO_PRODUCER
    assert out_decision.benefit.saved_bytes == 2 * 128 * 64 * 4
    assert out_decision.benefit.seconds == pytest.approx(2 * 128 * 64 * 4 / 38e9 + 2e-6)


def test_attention_core_on_x86(x86):
    _, _, graph = attention_tensors(batch=4, seq=256, head_dim=64)
    plan = plan_fusion(graph, x86)
    check_partition(plan, graph)
    (group,) = plan.chains
    assert len(plan.groups) == 1
    solution = group.solution
    assert solution.fused and [s.level for s in solution.levels] == ["L3", "L2", "L1"]
    for level in solution.levels:
        assert level.usage_bytes <= x86.memory.level(level.level).size_bytes
        assert level.tiles["k"] == 256  # the softmax axis stays whole at every level
    tree = group.tile_tree()
    assert tree.placement["S"] == "L1" and tree.placement["P"] == "L1"
    assert "S: for" in str(tree) or "S: once" in str(tree)


def test_conv_chain_fuses_with_its_pads(x86):
    _, _, graph = conv_chain_tensors(channels=32, height=28, width=28, mid_channels=32,
                                     out_channels=32)
    plan = plan_fusion(graph, x86)
    check_partition(plan, graph)
    (group,) = plan.chains
    assert group.anchors == ("conv1", "conv2")
    assert {"act", "conv2_pad"} <= set(group.computes)
    assert plan.decision("conv2_pad").action is Action.INTO_PRODUCER
    pad = plan.decision("conv1_pad")
    assert pad.action in (Action.INTO_CONSUMER, Action.STANDALONE)
    assert "recomputed" in pad.reason


def test_graph_without_a_chain():
    x = te.placeholder((64, 32), name="x")
    w = te.placeholder((16, 32), name="w")
    b = te.placeholder((16,), name="b")
    y = ops.relu(ops.dense(x, w, b, name="fc"), name="y")
    v = te.placeholder((32,), name="v")
    z = ops.softmax(ops.gemv(x, v, name="mv"), name="z")
    graph = Graph.from_outputs([y, z])
    plan = plan_fusion(graph, capacity_bytes=64 * 1024, peaks=PEAKS)
    check_partition(plan, graph)
    assert not plan.chains
    kinds = {g.computes: g.kind for g in plan.groups}
    assert kinds[("fc_matmul", "fc", "y")] is GroupKind.COMPUTE
    assert kinds[("mv", "z_max", "z_sub", "z_exp", "z_sum", "z")] is GroupKind.MEMORY
    assert plan.decision("fc_matmul").action is Action.STANDALONE
    assert plan.group_of("fc_matmul").solution.fused  # the single GEMM's tiles are solved too


def test_chain_that_cannot_fit_falls_back_to_unfused():
    a = te.placeholder((512, 512), name="a")
    b = te.placeholder((512, 512), name="b")
    d = te.placeholder((512, 512), name="d")
    c = ops.matmul(a, b, name="c")
    e = ops.matmul(ops.relu(c, name="r"), d, name="e")
    graph = Graph.from_outputs([e])
    big = LoopConstraint(minimum=64)
    plan = plan_fusion(graph, capacity_bytes=16 * 1024, peaks=PEAKS,
                       constraints={"i": big, "j": big, "k": big, "k1": big})
    check_partition(plan, graph)
    decision = plan.decision("c -> e")
    assert decision.action is Action.UNFUSED_CHAIN
    assert "does not fit on_chip" in decision.reason
    assert decision.reason.endswith("falling back to unfused code")
    assert [g.kind for g in plan.groups] == [GroupKind.COMPUTE, GroupKind.COMPUTE]
    assert plan.group_of("r").computes == ("c", "r")  # relu still joins its producer
    assert "unfused chain" in str(plan) and "falling back" in str(plan)


def test_softmax_too_wide_for_the_chip_falls_back():
    graph = gemm_softmax_gemm(m=64, l=8192, k=64, n=64)
    plan = plan_fusion(graph, capacity_bytes=16 * 1024, peaks=PEAKS)
    check_partition(plan, graph)
    assert plan.decision("scores -> out").action is Action.UNFUSED_CHAIN
    assert "k=8192" in plan.decision("scores -> out").reason
    assert plan.decision("probs_max").action is Action.STANDALONE


def test_prologue_recomputation_must_pay():
    a = te.placeholder((256, 256), name="a")
    b = te.placeholder((256, 256), name="b")
    act = ops.gelu(a, name="act")  # expensive, and a matmul would recompute it per reload
    out = ops.matmul(act, b, name="mm")
    cheap = ops.relu(ops.scale(b, 2.0, name="s"), name="cheap")  # One + One: always fused
    graph = Graph.from_outputs([out, cheap])
    # a tiny chip: the matmul reloads each tile of act 26 times, each time recomputing it
    plan = plan_fusion(graph, capacity_bytes=512, peaks=PEAKS)
    check_partition(plan, graph)
    decision = plan.decision("act")
    assert decision.action is Action.STANDALONE
    assert "does not pay (recomputed 26x)" in decision.reason
    assert plan.group_of("cheap").computes == ("s", "cheap")
    assert plan.decision("cheap").benefit.worthwhile
    # with room for bigger tiles act is reloaded 6 times: the saved transfers pay for that
    roomy = plan_fusion(graph, capacity_bytes=8 * 1024, peaks=PEAKS)
    fused = roomy.decision("act")
    assert fused.action is Action.INTO_CONSUMER and "recomputed 6x" in fused.reason
    assert fused.benefit.saved_bytes == 2 * 256 * 256 * 4
    assert roomy.group_of("act").computes == ("act", "mm")


def test_prologue_into_a_memory_bound_consumer():
    x = te.placeholder((64, 64), name="x")
    y = te.placeholder((64, 64), name="y")
    left = ops.relu(x, name="left")
    both = ops.add(left, ops.relu(y, name="right"), name="both")
    graph = Graph.from_outputs([both])
    plan = plan_fusion(graph, capacity_bytes=8 * 1024, peaks=PEAKS)
    check_partition(plan, graph)
    assert len(plan.groups) == 1
    assert plan.decision("left").action is Action.INTO_CONSUMER


def test_peak_figures_from_a_spec(x86):
    peaks = PeakFigures.from_spec(x86)
    dram = x86.memory.outermost
    assert peaks.bandwidth_bytes_per_s == pytest.approx(dram.bandwidth_bytes_per_cycle
                                                        * x86.compute.frequency_hz)
    assert peaks.flops_per_s == x86.compute.peak_flops("float32")
    gain = fusion_benefit(1e6, -2e6, 1, peaks)
    assert gain.seconds == pytest.approx(1e6 / peaks.bandwidth_bytes_per_s
                                         - 2e6 / peaks.flops_per_s + peaks.launch_overhead_s)


def test_bad_requests():
    graph = gemm_softmax_gemm(m=16, l=16, k=16, n=16)
    with pytest.raises(FusionError, match="needs a target spec, or capacity_bytes= and peaks="):
        plan_fusion(graph, capacity_bytes=1024)
    with pytest.raises(FusionError, match="peak figures must be positive"):
        PeakFigures(bandwidth_bytes_per_s=0, flops_per_s=1.0)
    plan = plan_fusion(graph, capacity_bytes=64 * 1024, peaks=PEAKS)
    with pytest.raises(FusionError, match="no group holds 'nope'"):
        plan.group_of("nope")
    with pytest.raises(FusionError, match="no decision about 'nope'"):
        plan.decision("nope")
