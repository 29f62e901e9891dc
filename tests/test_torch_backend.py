"""torch.compile(model, backend="tilecraft") (tilecraft.torch_backend): an MLP, a CNN and
BERT-like attention equal eager PyTorch; an unsupported operator splits the graph (the regions
around it compiled, it runs eagerly) with the reason logged; a graph with nothing convertible
and autograd calls run eagerly."""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from tilecraft.torch_backend import DECISIONS  # noqa: E402
from tilecraft.torch_backend.convert import supported_targets  # noqa: E402


class Attention(nn.Module):
    """A BERT-like encoder block: fused QKV projection, 4 heads, softmax, GELU MLP, two
    LayerNorms; awkward sizes (7 tokens, 36 features)."""

    def __init__(self, width: int = 36, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.ln1 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.ln2 = nn.LayerNorm(width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / (c // self.heads) ** 0.5
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = self.ln1(x + self.out(y))
        return self.ln2(x + self.down(F.gelu(self.up(x))))


def _cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(8, 5, 3, stride=2), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(5, 3))


CASES = {
    "mlp": (lambda: nn.Sequential(nn.Linear(13, 29), nn.Tanh(), nn.Linear(29, 7),
                                  nn.Sigmoid()), (3, 13)),
    "cnn": (_cnn, (1, 3, 13, 11)),
    "attention": (Attention, (2, 7, 36)),
}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    DECISIONS.clear()
    yield
    torch._dynamo.reset()


def test_the_backend_is_registered_by_entry_point():
    names = {ep.name: ep.value for ep in entry_points(group="torch_dynamo_backends")}
    assert names.get("tilecraft") == "tilecraft.torch_backend:tilecraft_backend"
    assert "tilecraft" in torch._dynamo.list_backends(exclude_tags=())


@pytest.mark.parametrize("case", sorted(CASES))
def test_models_equal_eager(case):
    build, shape = CASES[case]
    torch.manual_seed(0)
    model = build().eval()
    if case == "cnn":  # non-trivial running statistics
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    compiled = torch.compile(model, backend="tilecraft")
    with torch.no_grad():
        for seed in (1, 2):  # a second input: the weights and inputs are read at each call
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
            expected = model(x)
            got = compiled(x)
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert [d.mode for d in DECISIONS] == ["tilecraft"]
    assert DECISIONS[0].kernels >= 3


class WithUnsupported(nn.Module):
    """cumsum (no converter) between two convertible regions."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.head = nn.Linear(5, 3)

    def forward(self, x):
        return self.head(torch.relu(torch.cumsum(self.fc(x), dim=-1)))


def test_an_unsupported_operator_splits_the_graph_around_it(caplog):
    torch.manual_seed(0)
    model = WithUnsupported().eval()
    x = torch.randn(4, 6)
    with caplog.at_level(logging.WARNING, logger="tilecraft.torch_backend"), torch.no_grad():
        got = torch.compile(model, backend="tilecraft")(x)
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
    [decision] = DECISIONS
    assert decision.mode == "split" and decision.regions == 2 and decision.kernels >= 2
    assert "cumsum" in decision.reason and "no converter" in decision.reason
    assert any("split" in r.message and "cumsum" in r.message for r in caplog.records)


def test_nothing_convertible_runs_eagerly_with_the_reason(caplog):
    model = nn.Module()
    model.forward = lambda x: torch.cumsum(x, dim=0)
    x = torch.randn(5, 3)
    with caplog.at_level(logging.WARNING, logger="tilecraft.torch_backend"), torch.no_grad():
        got = torch.compile(model.forward, backend="tilecraft")(x)
    torch.testing.assert_close(got, torch.cumsum(x, dim=0))
    assert [d.mode for d in DECISIONS] == ["eager"]
    assert any("runs eagerly" in r.message and "cumsum" in r.message for r in caplog.records)


def test_autograd_calls_run_eagerly(caplog):
    torch.manual_seed(0)
    model = CASES["mlp"][0]()
    x = torch.randn(3, 13)
    with caplog.at_level(logging.WARNING, logger="tilecraft.torch_backend"):
        got = torch.compile(model, backend="tilecraft")(x)
    got.sum().backward()  # the eager path keeps the autograd graph
    assert model[0].weight.grad is not None
    assert any("autograd" in r.message for r in caplog.records)


def test_the_converter_covers_the_core_operators():
    names = set(supported_targets())
    for op in ("aten.addmm.default", "aten.convolution.default", "aten._softmax.default",
               "aten.native_layer_norm.default", "aten.bmm.default", "aten.gelu.default"):
        assert op in names


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                               nn.BatchNorm2d(cout), nn.ReLU(),
                               nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.a(x) + (x if self.down is None else self.down(x)))


def resnet18_small() -> nn.Module:
    """ResNet-18's structure (7x7/2 stem, 3x3/2 max pool, four stages of two basic blocks),
    narrow: widths 8-64."""
    layers = [nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    widths = [8, 16, 32, 64]
    cin = 8
    for stage, width in enumerate(widths):
        for block in range(2):
            layers.append(BasicBlock(cin, width, 2 if stage and not block else 1))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    return nn.Sequential(*layers)


@pytest.mark.slow
def test_a_small_resnet18_equals_eager():
    torch.manual_seed(0)
    model = resnet18_small().eval()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, 45, 37)  # odd sizes through every stride-2 stage
    with torch.no_grad():
        got = torch.compile(model, backend="tilecraft")(x)
        torch.testing.assert_close(got, model(x), rtol=1e-3, atol=1e-3)
    assert [d.mode for d in DECISIONS] == ["tilecraft"]


def test_parameters_and_buffers_are_frozen_and_folded(monkeypatch):
    """The CNN's 10 parameters and buffers become constants: batch norm folds into the conv
    before it, the weight packing runs once at load; equal to eager either way."""
    torch.manual_seed(0)
    model = _cnn().eval()
    model[1].running_mean.uniform_(-0.5, 0.5)
    model[1].running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 3, 13, 11)
    kernels = {}
    for freeze in ("0", "1"):
        monkeypatch.setenv("TILECRAFT_TORCH_FREEZE", freeze)
        torch._dynamo.reset()
        DECISIONS.clear()
        with torch.no_grad():
            got = torch.compile(model, backend="tilecraft")(x)
            torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
        [decision] = DECISIONS
        assert decision.mode == "tilecraft"
        assert decision.frozen == (10 if freeze == "1" else 0)
        kernels[freeze] = decision.kernels
    assert kernels["1"] < kernels["0"]  # the batch norm's kernel is gone


def test_a_changed_parameter_recompiles_with_the_weights_as_inputs(caplog):
    torch.manual_seed(0)
    model = CASES["mlp"][0]().eval()
    compiled = torch.compile(model, backend="tilecraft")
    x = torch.randn(3, 13)
    with caplog.at_level(logging.WARNING, logger="tilecraft.torch_backend"), torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        assert DECISIONS[-1].frozen == 4
        model[0].weight.mul_(-0.5)  # in place: the version counter moves
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        assert any("changed since it was compiled" in r.message for r in caplog.records)
        model[2].bias.add_(1.0)  # the weights are inputs now: read at every call
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        model[2].weight = nn.Parameter(torch.randn(7, 29))  # another tensor
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def test_a_replaced_parameter_is_not_read_from_the_frozen_copy():
    torch.manual_seed(0)
    model = CASES["mlp"][0]().eval()
    compiled = torch.compile(model, backend="tilecraft")
    x = torch.randn(3, 13)
    with torch.no_grad():
        compiled(x)
        model[0].bias = nn.Parameter(torch.randn(29))
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def test_parameters_made_under_inference_mode_are_frozen_too():
    """Inference tensors have no version counter: the guard checks identity and address."""
    torch.manual_seed(0)
    with torch.inference_mode():
        model = CASES["mlp"][0]().eval()
        x = torch.randn(3, 13)
        got = torch.compile(model, backend="tilecraft")(x)
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
    assert DECISIONS[-1].mode == "tilecraft" and DECISIONS[-1].frozen == 4
