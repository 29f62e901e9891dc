"""tc.autodiff.backward (issue 18 item 2): the backward graph of a loss, the forward activations
it reads kept as outputs, checked against PyTorch autograd and the reference; split into a
forward and a gradient graph; compiled for x86 like any graph (a conv's weight gradient a
contraction the mapping stage considers, as it does the forward conv)."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.autodiff import backward
from tilecraft.autodiff.examples import mlp, small_cnn
from tilecraft.errors import AutodiffError
from tilecraft.fusion.classify import is_compute_intensive
from tilecraft.graph import Graph


def _cnn():  # awkward sizes: primes, a batch of 3, a stride-2 conv over an odd image
    return small_cnn(batch=3, image=7, channels=(3, 5, 2), classes=3)


def test_backward_graph_keeps_the_activations_it_reads() -> None:
    model = _cnn()
    bw = backward(model.graph, model.loss, model.params)
    names = [t.name for t in bw.graph.outputs]
    assert names[:9] == ["loss", *(f"grad_{p.name}" for p in model.params)]
    saved = {t.name for t in bw.saved}
    assert {"conv1_pad", "conv2_pad", "flat"} <= saved  # the weight gradients' inputs
    assert set(names[9:]) == saved
    forward = set(model.graph.topological_order())
    for tensor in bw.gradient_computes:  # gradient computes read forward computes only there
        assert all(p in bw.saved or p.is_placeholder or p not in forward for p in tensor.inputs)
    assert all(t in forward for t in bw.saved)
    without = backward(model.graph, model.loss, model.params, keep_activations=False)
    assert [t.name for t in without.graph.outputs] == names[:9]


def test_backward_gradients_match_torch_autograd() -> None:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    model = _cnn()
    bw = backward(model.graph, model.loss, model.params)
    params, data = model.init(5), model.batch(5)
    results = dict(zip([t.name for t in bw.graph.outputs],
                       tc.reference.run(bw.graph, **params, **data)))
    theirs = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True)
              for n, v in params.items()}
    h = torch.tensor(data["x"], dtype=torch.float64)
    for i, stride in ((1, 1), (2, 2)):
        h = F.conv2d(h, theirs[f"w{i}"], stride=stride, padding=1)
        h = F.relu(F.batch_norm(h, None, None, theirs[f"gamma{i}"], theirs[f"beta{i}"],
                                training=True))
    logits = F.linear(h.flatten(1), theirs["wd"], theirs["bd"])
    loss = F.cross_entropy(logits, torch.tensor(data["onehot"]).argmax(1))
    loss.backward()
    np.testing.assert_allclose(results["loss"], float(loss.detach()), rtol=1e-5)
    for name, value in theirs.items():
        np.testing.assert_allclose(results[f"grad_{name}"], value.grad.numpy(), rtol=1e-3,
                                   atol=1e-5, err_msg=name)


def test_split_graphs_compose_to_the_whole() -> None:
    model = mlp(batch=5, sizes=(3, 7, 2))
    bw = backward(model.graph, model.loss, model.params)
    forward, gradients = bw.split()
    assert [t.name for t in forward.outputs] == ["loss", *(t.name for t in bw.saved)]
    assert {t.name for t in bw.saved} <= {t.name for t in gradients.inputs}
    assert not any(t.name == "fc1_matmul" for t in gradients.computes)  # nothing recomputed
    arrays = {**model.init(2), **model.batch(2)}
    loss, *saved = tc.reference.run(forward, **arrays)
    feed = {**arrays, **{t.name: v for t, v in zip(bw.saved, saved)}}
    feed = {t.name: feed[t.name] for t in gradients.inputs}
    split = tc.reference.run(gradients, **feed)
    whole = tc.reference.run(Graph.from_outputs(list(bw.gradients)), **arrays)
    for a, b in zip(split, whole):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_backward_compiles_for_x86_like_any_graph() -> None:
    from tilecraft.target.registry import get_target

    target = get_target("x86_avx512")
    if not target.available().execute:
        pytest.skip(f"x86_avx512 cannot run here: {target.available().explain()}")
    model = _cnn()
    bw = backward(model.graph, model.loss, model.params)
    grad_w2 = bw.gradients[3]
    assert grad_w2.name == "grad_w2" and is_compute_intensive(grad_w2)
    exe = tc.compile(bw.graph, target)
    arrays = {**model.init(4), **model.batch(4)}
    for ours, expected in zip(exe(**arrays), tc.reference.run(bw.graph, **arrays)):
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-5 * scale)
    considered = {entry.operator for entry in exe.report.mappings}
    assert {"conv2", "grad_w2"} <= considered  # the weight gradient meets the same mapper


def test_backward_refusals_name_the_culprit() -> None:
    x = te.placeholder((3, 2), name="x")
    w = te.placeholder((2, 2), name="w")
    unused = te.placeholder((4,), name="unused")
    loss = ops.mean(ops.dense(x, w, name="y"), name="loss")
    graph = Graph.from_outputs([loss, ops.scale(unused, 2.0, name="other")])
    with pytest.raises(AutodiffError, match="does not depend on unused"):
        backward(graph, loss, [w, unused])
    zeros = backward(graph, "loss", [w, unused], strict=False)
    assert np.all(tc.reference.run(zeros.gradients[1]) == 0)
    stranger = ops.mean(ops.scale(x, 3.0, name="z"), name="stranger")
    with pytest.raises(AutodiffError, match="stranger is not a tensor of the graph"):
        backward(graph, stranger)
    with pytest.raises(AutodiffError, match="takes a tilecraft Graph"):
        backward(loss, loss)  # type: ignore[arg-type]


def test_fusion_planner_treats_the_backward_graph_like_any_graph() -> None:
    from tilecraft.fusion import plan_fusion
    from tilecraft.fusion.planner import GroupKind
    from tilecraft.target.registry import get_target

    model = _cnn()
    bw = backward(model.graph, model.loss, model.params)
    plan = plan_fusion(bw.graph, get_target("x86_avx512").spec)
    planned = {name for group in plan.groups for name in group.computes}
    assert planned == {t.name for t in bw.graph.computes}
    weight = plan.group_of("grad_w2")  # a contraction: its own tile analysis, as conv2 has
    assert weight.kind is GroupKind.COMPUTE and weight.solution is not None
    assert plan.group_of("conv2").solution is not None
    # relu' and the batch norm's gradient run in one memory-bound kernel (Eq. 4.10 said so)
    assert plan.group_of("grad_bn1_via_relu1") is plan.group_of("grad_relu1_via_conv2_pad")


def test_reshape_gradients_are_gathers_without_loops() -> None:
    """Attention's head split (tokens, hidden) -> (tokens, heads, d) and merge: each gradient
    reads the output gradient once per element (the floordiv/mod pair known from z, the
    flat index a mixed-radix number), no reduce loop, no padded copy."""
    from tilecraft.autodiff import grad

    q = te.placeholder((7, 15), name="q")
    split = ops.reshape(q, (7, 3, 5), name="split")
    merged = ops.reshape(ops.transpose(split, (1, 0, 2), name="heads"), (3, 35), name="merged")
    rng = np.random.default_rng(0)
    for out, shape in ((split, (7, 3, 5)), (merged, (3, 35))):
        (dq,) = grad(out, [q])
        computes = Graph.from_outputs([dq]).computes
        assert all(not t.reduce_axes for t in computes), [t.statement() for t in computes]
        g = rng.standard_normal(shape).astype(np.float32)
        expected = g.reshape(7, 3, 5) if out is split else \
            g.reshape(3, 7, 5).transpose(1, 0, 2)
        np.testing.assert_array_equal(tc.reference.run(dq, **{f"grad_{out.name}": g}),
                                      expected.reshape(7, 15))


def test_a_vector_loss_is_seeded_with_ones() -> None:
    """A loss of shape (3,) differentiates as its sum: the seed is a te.constant of ones,
    so the backward graph needs no input beyond the forward's."""
    x = te.placeholder((3, 2), name="x")
    w = te.placeholder((2, 2), name="w")
    loss = ops.reduce_sum(ops.dense(x, w, name="y"), axes=1, name="loss")
    bw = backward(Graph.from_outputs([loss]), loss)
    assert [t.name for t in bw.wrt] == ["x", "w"] and bw.seed.is_constant
    assert {t.name for t in bw.graph.inputs} == {"x", "w"}
    xs = np.arange(6, dtype=np.float32).reshape(3, 2)
    ws = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
    _, dx, dw = tc.reference.run(bw.graph, x=xs, w=ws)
    np.testing.assert_allclose(dx, np.tile(ws.sum(0), (3, 1)))
    np.testing.assert_allclose(dw, np.tile(xs.sum(0), (2, 1)))
