"""Training fusion decisions (issue 18 item 4, thesis §4.6.2): a memory-bound forward operator
fused with its producer, its consumer, both or neither by Eq. 4.10, the backward graph's
recomputation counted; a case fused, a case left unfused with the reason, and the decisions in
the compile report."""

from __future__ import annotations

from tilecraft import ops, te
from tilecraft.autodiff import backward
from tilecraft.autodiff.fusion import Case, decide
from tilecraft.fusion.benefit import PeakFigures, fusion_benefit
from tilecraft.fusion.classify import flop_count
from tilecraft.graph import Graph

PEAKS = PeakFigures(bandwidth_bytes_per_s=40e9, flops_per_s=1e11, launch_overhead_s=2e-6)


def _mlp(batch: int = 61, width: int = 257):
    x = te.placeholder((batch, width), name="x")
    w1 = te.placeholder((width, width), name="w1")
    w2 = te.placeholder((3, width), name="w2")
    h = ops.relu(ops.dense(x, w1, name="d1"), name="h")
    loss = ops.mean(ops.dense(h, w2, name="d2"), name="loss")
    return backward(Graph.from_outputs([loss]), loss, wrt=[w1, w2])


def test_relu_fuses_into_its_consumer_not_its_producer() -> None:
    bw = _mlp()
    decision = decide(bw, PEAKS)["h"]
    assert decision.case is Case.CONSUMER
    consumer, producer = decision.consumer, decision.producer
    assert consumer is not None and producer is not None
    assert (consumer.kind, producer.kind) == ("One+Many", "Many+One")
    # relu' reads d1, so fusing d1 -> h recomputes the whole matmul in the backward
    assert producer.recomputed
    assert producer.benefit.saved_flops == -flop_count(bw.forward.tensor("d1"))
    assert not producer.benefit.worthwhile and consumer.benefit.worthwhile
    # Eq. 4.10's terms by hand: h and its gradient neither written nor read (2 |h| each), h
    # recomputed from d1 (|h| - |d1| bytes, one max per element), a kernel fewer in each graph
    h = 61 * 257 * 4
    expected = fusion_benefit(2 * h + 2 * h + h - h, -61 * 257, 2, PEAKS)
    assert consumer.benefit == expected
    assert decision.benefit == expected
    assert "R = -" in decision.reason and "d1 recomputed in the backward" in decision.reason


def test_neither_when_recomputing_the_conv_does_not_pay_and_the_output_is_shared() -> None:
    x = te.placeholder((1, 16, 23, 23), name="x")
    w = te.placeholder((16, 16, 3, 3), name="w")
    r = ops.relu(ops.conv2d(x, w, padding=1, name="conv"), name="r")
    s1 = ops.reduce_sum(r, name="s1")
    s2 = ops.reduce_sum(ops.mul(r, r, name="sq"), name="s2")
    loss = ops.add(s1, s2, name="loss")
    bw = backward(Graph.from_outputs([loss]), loss, wrt=[w])
    decision = decide(bw, PEAKS)["r"]
    assert decision.case is Case.NEITHER and decision.benefit is None
    assert decision.consumer is None and decision.producer is not None
    assert decision.producer.recomputed and not decision.producer.benefit.worthwhile
    assert "no case has R > 0" in decision.reason
    assert "r feeds 2 computes, so it is written anyway" in decision.reason
    # with a machine 100x faster at arithmetic the recomputation pays: fused with the conv
    fast = PeakFigures(bandwidth_bytes_per_s=40e9, flops_per_s=1e13)
    assert decide(bw, fast)["r"].case is Case.PRODUCER


def test_one_plus_one_pays_and_both_adds_the_pairs() -> None:
    x = te.placeholder((37, 41), name="x")
    w = te.placeholder((41, 41), name="w")
    a = ops.scale(ops.matmul(x, w, name="mm"), 0.5, name="a")
    b = ops.tanh(a, name="b")
    c = ops.sigmoid(b, name="c")
    loss = ops.mean(c, name="loss")
    bw = backward(Graph.from_outputs([loss]), loss, wrt=[w])
    decisions = decide(bw, PEAKS)
    assert decisions["b"].consumer is not None and decisions["b"].consumer.kind == "One+One"
    assert decisions["b"].case is Case.BOTH
    p, c_ = decisions["b"].producer, decisions["b"].consumer
    assert decisions["b"].benefit.saved_bytes == p.benefit.saved_bytes + c_.benefit.saved_bytes
    assert decisions["b"].benefit.saved_kernels == 4
