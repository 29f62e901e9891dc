"""The model zoo (tilecraft.models) end to end: each network built with the Python API is run by
the numpy reference and compared with onnxruntime on its ONNX export (same seeded weights), the
export imported back through tc.from_onnx, and both compiled for x86 and compared.

Tolerance: fp32, rtol = atol = 1e-3 against onnxruntime (layer norms and softmax reorder sums);
the compiled programs against the numpy reference at 1e-4. The default run takes the small
configurations (every operator and structure); the compiled ones and the full sizes are slow.
"""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import tilecraft as tc  # noqa: E402
import tilecraft.models as models  # noqa: E402

RTOL = ATOL = 1e-3


def _input(graph: tc.Graph, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(graph.inputs[0].shape).astype(np.float32)


def _onnxruntime(model, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _compile(name: str, graph: tc.Graph):
    return tc.compile(graph, target="x86_avx512")


@pytest.mark.parametrize("name", list(models.NETWORKS))
def test_small_network_reference_matches_onnxruntime_both_ways(name):
    graph = models.build(name, small=True)
    model = models.to_onnx(name, small=True)
    onnx.checker.check_model(model)
    x = _input(graph)
    expected = _onnxruntime(model, x)
    assert expected.shape == graph.outputs[0].shape
    np.testing.assert_allclose(tc.reference.run(graph, x=x), expected, rtol=RTOL, atol=ATOL)
    imported = tc.from_onnx(model)
    assert [t.name for t in imported.inputs] == ["x"]
    np.testing.assert_allclose(tc.reference.run(imported, x=x), expected, rtol=RTOL, atol=ATOL)


def test_weights_are_seeded_and_shared_by_both_builds():
    a, b = models.build("resnet18", small=True), models.build("resnet18", small=True, seed=1)
    x = _input(a)
    assert not np.allclose(tc.reference.run(a, x=x), tc.reference.run(b, x=x))
    again = models.build("resnet18", small=True)
    np.testing.assert_array_equal(tc.reference.run(a, x=x), tc.reference.run(again, x=x))
    initializers = {i.name: onnx.numpy_helper.to_array(i)
                    for i in models.to_onnx("resnet18", small=True).graph.initializer}
    constants = {t.name: t.constant_value for t in a.constants}
    np.testing.assert_array_equal(initializers["stem_conv_w"], constants["stem_conv_w"])


def test_full_size_shapes_follow_the_papers():
    """Built (not run): the thesis's and the papers' shapes."""
    assert models.transformer_encoder_layer("large").inputs[0].shape == (512, 1024)
    bert = models.bert_base_layer()
    assert bert.inputs[0].shape == (512, 768)
    scores = next(t for t in bert.computes if t.name == "layer_attn_scores")
    assert scores.shape == (12, 512, 512)  # Table 3.5 G2: 12 x 512 x 64 @ 64 x 512
    assert models.vit_base_block().inputs[0].shape == (197, 768)
    resnet = models.resnet50()
    assert resnet.inputs[0].shape == (1, 3, 224, 224) and resnet.outputs[0].shape == (1, 1000)
    convs = [t for t in resnet.computes if t.name.endswith("_conv")]
    assert len(convs) == 53  # stem + 16 bottlenecks x 3 + 4 projection shortcuts
    mobile = models.mobilenet_v2()
    assert mobile.outputs[0].shape == (1, 1000)
    assert sum(t.name.endswith("_dw_conv") for t in mobile.computes) == 17


def test_unknown_network_is_refused_by_name():
    with pytest.raises(models.UnknownNetworkError, match="resnet18"):
        models.build("resnet34")


def _compiled_matches(name: str, small: bool) -> None:
    pytest.importorskip("llvmlite")
    graph = models.build(name, small=small)
    model = models.to_onnx(name, small=small)
    x = _input(graph)
    expected = _onnxruntime(model, x)
    np.testing.assert_allclose(_compile(name, graph)(x), expected, rtol=RTOL, atol=ATOL)
    imported = _compile(name, tc.from_onnx(model))(x)
    np.testing.assert_allclose(imported, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", ["bert_base", "mobilenet_v2"])
def test_small_network_compiled_for_x86_matches(name):
    """One encoder and one conv net in the default run (a few seconds each)."""
    _compiled_matches(name, small=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(models.NETWORKS) - {"bert_base", "mobilenet_v2"}))
def test_small_network_compiled_for_x86_matches_slow(name):
    _compiled_matches(name, small=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(models.NETWORKS))
def test_full_network_compiled_for_x86_matches(name):
    _compiled_matches(name, small=False)


def test_export_script_writes_files_onnx_reads_back(tmp_path):
    import importlib.util
    from pathlib import Path

    script = Path(__file__).parent.parent / "scripts" / "export_onnx_models.py"
    spec = importlib.util.spec_from_file_location("export_onnx_models", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([str(tmp_path), "--small", "vit_base", "resnet50"]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["resnet50_small.onnx", "vit_base_small.onnx"]
    model = onnx.load(tmp_path / "vit_base_small.onnx")
    graph = models.build("vit_base", small=True)
    x = _input(graph)
    np.testing.assert_allclose(tc.reference.run(tc.from_onnx(model), x=x),
                               tc.reference.run(graph, x=x), rtol=RTOL, atol=ATOL)
    with pytest.raises(SystemExit):
        module.main([str(tmp_path), "resnet34"])
