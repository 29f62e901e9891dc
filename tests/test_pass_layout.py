"""Layout choice: conv2d rewritten into the layout the target's spec prefers, transposes at the
graph's boundaries only, values the reference's."""

import copy

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.passes import check_equivalent_interface, run_passes
from tilecraft.passes.layout import choose_layout, conv2d_operands, is_product_reduction
from tilecraft.passes.simplify import gathered, index_map
from tilecraft.target.spec import TargetSpec


class _Spec:
    preferred_layouts = {"conv2d": "NHWC"}


def _same_values(before: tc.Graph, after: tc.Graph, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    inputs = {t.name: rng.standard_normal(t.shape).astype(t.dtype.numpy) for t in before.inputs}
    check_equivalent_interface(before, after, "choose_layout")
    np.testing.assert_allclose(tc.reference.run(after, inputs=inputs),
                               tc.reference.run(before, inputs=inputs), rtol=1e-5, atol=1e-5)


def _permutation_gathers(graph: tc.Graph) -> list[str]:
    """Computes that only move data in a non-identity order (the transposes left)."""
    names = []
    for tensor in graph.computes:
        load = gathered(tensor)
        if load is None or tensor.size != load.tensor.size:
            continue
        offsets = index_map(tensor, load)
        if not np.array_equal(offsets, np.arange(tensor.size)):
            names.append(tensor.name)
    return names


def _chain(bias: bool = False, channels=(3, 5, 2), size=(7, 5)):
    rng = np.random.default_rng(0)
    c0, c1, c2 = channels
    x = te.placeholder((1, c0, *size), name="x")
    w1 = te.constant(rng.standard_normal((c1, c0, 3, 3)), "float32", name="w1")
    w2 = te.constant(rng.standard_normal((c2, c1, 3, 2)), "float32", name="w2")
    h = ops.conv2d(x, w1, padding=1, name="c1")
    if bias:
        b = te.constant(rng.standard_normal(c1), "float32", name="b")
        h = te.compute(h.shape, lambda n, k, i, j: h[n, k, i, j] + b[k], name="biased")
    h = ops.relu(h, name="r1")
    y = ops.conv2d(h, w2, stride=2, padding=(1, 0), name="c2")
    return tc.Graph.from_outputs([ops.relu(y, name="y")])


@pytest.mark.parametrize("bias", [False, True])
def test_conv_relu_conv_keeps_one_transpose_pair_at_the_boundary(bias):
    graph = _chain(bias)
    after = choose_layout(graph, _Spec())
    # in: x padded for c1, then transposed; out: y; none between the convs
    assert sorted(_permutation_gathers(after)) == ["c1_pad_nhwc", "y"]
    assert after.tensor("y").inputs[0].shape == (1, 4, 2, 2)  # y = transpose of NHWC data
    # the weights are folded constants in HWIO, no conv reads an NCHW value
    assert {"w1_hwio", "w2_hwio"} <= {t.name for t in after.constants}
    assert not [t for t in after.computes if conv2d_operands(t)]
    _same_values(graph, after)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 5, 7), (1, 4, 11, 2)])
def test_awkward_shapes_and_groups_agree_with_the_reference(shape):
    n, c, h, w = shape
    x = te.placeholder(shape, name="x")
    groups = 2 if c % 2 == 0 else 1
    wt = te.placeholder((2 * groups, c // groups, min(h, 2), 1), name="wt")
    y = ops.conv2d(x, wt, groups=groups, padding=((1, 0), (0, 2)), dilation=(1, 1), name="y")
    graph = tc.Graph.from_outputs([y])
    after = choose_layout(graph, _Spec())
    assert "y_nhwc" in {t.name for t in after.computes}
    _same_values(graph, after)


def test_no_preference_leaves_the_graph_unchanged():
    graph = _chain()
    assert choose_layout(graph) is graph
    assert choose_layout(graph, None) is graph

    class NCHW:
        preferred_layouts = {"conv2d": "NCHW"}

    assert choose_layout(graph, NCHW()) is graph
    spec = TargetSpec.model_fields["preferred_layouts"]
    assert spec.default_factory() == {}


def test_an_nhwc_conv_is_left_alone():
    x = te.placeholder((1, 5, 5, 3), name="x")
    w = te.placeholder((3, 3, 3, 4), name="w")
    graph = tc.Graph.from_outputs([ops.conv2d(x, w, layout="NHWC", name="y")])
    assert choose_layout(graph, _Spec()) is graph


def test_run_passes_hands_the_spec_to_passes_that_use_it():
    graph = _chain()
    seen = []

    class Spy:
        name = "spy"
        uses_spec = True

        def __call__(self, graph, spec):
            seen.append(spec)
            return graph

    spec = _Spec()
    run_passes(graph, {"spy": Spy()}, spec=spec)
    assert seen == [spec]
    after, applied = run_passes(graph, {"choose_layout": choose_layout}, spec=spec)
    assert applied == ["choose_layout"] and "c1_nhwc" in {t.name for t in after.computes}


def test_spec_field_is_validated():
    from tilecraft.target.registry import get_target

    pytest.importorskip("tilecraft_x86_avx512")
    data = get_target("x86_avx512").spec.model_dump(mode="json")
    data["preferred_layouts"] = {"conv2d": "NHWC"}
    assert TargetSpec.model_validate(data).preferred_layouts == {"conv2d": "NHWC"}
    data["preferred_layouts"] = {"conv2d": "CHWN"}
    with pytest.raises(Exception, match="NHWC"):
        TargetSpec.model_validate(data)


def test_x86_compiles_the_nhwc_chain_when_its_spec_prefers_it():
    pytest.importorskip("tilecraft_x86_avx512")
    from tilecraft.target.registry import get_target

    base = get_target("x86_avx512")
    spec = base.spec.model_copy(update={"preferred_layouts": {"conv2d": "NHWC"},
                                        "layout_min_convolutions": 1, "layout_min_pixels": 0})

    class PrefersNHWC(type(base)):
        @property
        def spec(self):
            return spec

    target = copy.copy(base)
    target.__class__ = PrefersNHWC
    graph = _chain(bias=True)
    x = np.random.default_rng(3).standard_normal((1, 3, 7, 5)).astype(np.float32)
    exe = tc.compile(graph, target=target)
    assert "c1_nhwc" in {t.name for t in exe.graph.computes}
    np.testing.assert_allclose(exe(x), tc.reference.run(graph, x=x), rtol=1e-4, atol=1e-4)


def test_pools_are_rewritten_too_so_transposes_stay_at_the_boundary():
    """ResNet's shape: a stem conv, a max pool, a conv, a residual add, a global average pool.
    The pools (reductions of one value, no products) are relabelled like the elementwise
    computes, so no transpose is left between them and the convolutions; a matmul-like
    reduction (a product of two loads) is not."""
    rng = np.random.default_rng(1)
    x = te.placeholder((1, 3, 13, 11), name="x")
    w1 = te.constant(rng.standard_normal((8, 3, 3, 3)), "float32", name="w1")
    w2 = te.constant(rng.standard_normal((8, 8, 3, 3)), "float32", name="w2")
    stem = ops.relu(ops.conv2d(x, w1, stride=2, padding=1, name="stem"), name="stem_relu")
    pooled = ops.max_pool2d(stem, 3, stride=2, padding=1, name="pool")
    body = ops.conv2d(pooled, w2, padding=1, name="body")
    summed = ops.relu(te.compute(body.shape, lambda n, k, i, j: body[n, k, i, j]
                                 + pooled[n, k, i, j], name="sum"), name="sum_relu")
    graph = tc.Graph.from_outputs([ops.global_avg_pool2d(summed, name="gap")])
    after = choose_layout(graph, _Spec())
    gathers = _permutation_gathers(after)
    # the input's transpose only: the output, [1, 8, 1, 1], is the NHWC [1, 1, 1, 8] in order
    assert gathers == ["stem_pad_nhwc"]
    assert {"pool_nhwc", "gap_nhwc"} <= {t.name for t in after.computes}
    _same_values(graph, after)
    assert is_product_reduction(after.tensor("body_nhwc"))
    assert not is_product_reduction(after.tensor("pool_nhwc"))


def test_a_graph_with_a_kind_that_prefers_nchw_is_left_as_written():
    """MobileNet's shape, pointwise -> depthwise -> pointwise: with grouped convolutions
    preferring NCHW the whole graph stays NCHW (no transposes around each depthwise one);
    without that preference every convolution is rewritten."""
    rng = np.random.default_rng(2)
    x = te.placeholder((1, 8, 9, 9), name="x")
    expand = ops.conv2d(x, te.constant(rng.standard_normal((16, 8, 1, 1)), "float32",
                                       name="we"), name="expand")
    depthwise = ops.conv2d(expand, te.constant(rng.standard_normal((16, 1, 3, 3)), "float32",
                                               name="wd"), groups=16, padding=1, name="dw")
    project = ops.conv2d(depthwise, te.constant(rng.standard_normal((8, 16, 1, 1)),
                                                "float32", name="wp"), name="project")
    graph = tc.Graph.from_outputs([project])

    class Mixed:
        preferred_layouts = {"conv2d": "NHWC", "grouped_conv2d": "NCHW"}

    assert choose_layout(graph, Mixed()) is graph
    after = choose_layout(graph, _Spec())
    assert {"expand_nhwc", "dw_nhwc", "project_nhwc"} <= {t.name for t in after.computes}
    _same_values(graph, after)


def test_a_graph_of_few_convolutions_is_left_as_written():
    """layout_min_convolutions: the chain's two convolutions stay NCHW under a minimum of 3."""

    class AtLeastThree:
        preferred_layouts = {"conv2d": "NHWC"}
        layout_min_convolutions = 3

    class AtLeastTwo(AtLeastThree):
        layout_min_convolutions = 2

    graph = _chain()
    assert choose_layout(graph, AtLeastThree()) is graph
    assert "c1_nhwc" in {t.name for t in choose_layout(graph, AtLeastTwo()).computes}


def test_convolutions_of_few_pixels_keep_nchw_inside_a_rewritten_graph():
    """layout_min_pixels: the stride-2 conv's 4x3 output stays NCHW (transposes around it),
    the 7x5 ones are rewritten; values unchanged."""

    class FewPixelsNCHW:
        preferred_layouts = {"conv2d": "NHWC"}
        layout_min_pixels = 20

    graph = _chain()
    after = choose_layout(graph, FewPixelsNCHW())
    names = {t.name for t in after.computes}
    assert "c1_nhwc" in names and "c2_nhwc" not in names
    assert conv2d_operands(after.tensor("c2")) is not None   # still the NCHW convolution
    _same_values(graph, after)
