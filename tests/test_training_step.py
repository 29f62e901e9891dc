"""A training step end to end (issue 18 item 5): forward + backward + SGD compiled as ONE x86
Executable (parameters and data in, loss and updated parameters out), 20 steps of an MLP and of
a small CNN (conv-bn-relu x2 + dense) against the same model trained by PyTorch, step by step."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft.autodiff import compile_step, sgd_step
from tilecraft.autodiff.examples import mlp, small_cnn
from tilecraft.errors import AutodiffError


def _torch_loss(kind: str, params: dict, data: dict):
    import torch

    F = torch.nn.functional
    x = torch.tensor(data["x"])
    labels = torch.tensor(data["onehot"]).argmax(1)
    h = x
    if kind == "mlp":
        layers = sum(1 for name in params if name.startswith("w"))
        for i in range(1, layers + 1):
            h = F.linear(h, params[f"w{i}"], params[f"b{i}"])
            h = F.relu(h) if i < layers else h
    else:
        for i, stride in ((1, 1), (2, 2)):
            h = F.conv2d(h, params[f"w{i}"], stride=stride, padding=1)
            h = F.batch_norm(h, None, None, params[f"gamma{i}"], params[f"beta{i}"],
                             training=True)
            h = F.relu(h)
        h = F.linear(h.flatten(1), params["wd"], params["bd"])
    return F.cross_entropy(h, labels)


def _x86():
    from tilecraft.target.registry import get_target

    target = get_target("x86_avx512")
    if not target.available().execute:
        pytest.skip(f"x86_avx512 cannot run here: {target.available().explain()}")
    return target


@pytest.mark.parametrize("kind, model", [
    ("mlp", lambda: mlp(batch=13, sizes=(7, 31, 17, 5))),
    ("cnn", lambda: small_cnn(batch=3, image=7, channels=(3, 5, 6), classes=4)),
])
def test_twenty_sgd_steps_match_pytorch(kind: str, model) -> None:
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    model = model()
    lr = 0.05
    step = sgd_step(model.graph, model.loss, model.params, lr=lr)
    exe = compile_step(step, _x86())
    names = [p.name for p in model.params]
    assert [t.name for t in step.graph.outputs] == ["loss", *(f"{n}_next" for n in names)]
    assert sorted(exe.input_names) == sorted([*names, "x", "onehot"])
    params = model.init(3)
    data = model.batch(3)
    theirs = {n: torch.tensor(v, requires_grad=True) for n, v in params.items()}
    losses = []
    for _ in range(20):
        loss, *updated = exe(**params, **data)
        expected = _torch_loss(kind, theirs, data)
        expected.backward()
        with torch.no_grad():
            for p in theirs.values():
                p -= lr * p.grad
                p.grad = None
        np.testing.assert_allclose(float(loss), float(expected.detach()), rtol=2e-5, atol=1e-6)
        params = dict(zip(names, updated))
        for n in names:
            np.testing.assert_allclose(params[n], theirs[n].detach().numpy(), rtol=1e-4,
                                       atol=1e-5)
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]
    assert all(b < a for a, b in zip(losses, losses[1:]))  # one batch: plain descent
    assert any(note.startswith("training fusion relu1:") for note in exe.report.notes)


def test_training_step_equals_reference_on_the_first_step() -> None:
    """The one program by the reference interpreter: the same loss and parameters."""
    model = small_cnn(batch=2, image=5, channels=(2, 3), classes=3)
    step = sgd_step(model.graph, model.loss, model.params, lr=0.1)
    arrays = {**model.init(1), **model.batch(1)}
    reference = tc.reference.run(step.graph, **arrays)
    compiled = tc.compile(step.graph, _x86())(**arrays)
    for ours, expected in zip(compiled, reference):
        np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-6)


def test_sgd_step_refuses_bad_parameters() -> None:
    model = mlp(batch=2, sizes=(3, 4, 2))
    with pytest.raises(AutodiffError, match="learning rate"):
        sgd_step(model.graph, model.loss, model.params, lr=0.0)
    relu = model.graph.tensor("relu1")
    with pytest.raises(AutodiffError, match="relu1 is a compute"):
        sgd_step(model.graph, model.loss, [relu], lr=0.1)
