"""Static analysis of operators (thesis §4.3.1): numbers and structure of the small graph."""

from __future__ import annotations

import pickle

import pytest

from tilecraft import ops, te
from tilecraft.graph import Graph
from tilecraft.ops import catalog
from tilecraft.search import OperatorAnalysis, SearchError, analyze
from tilecraft.search.analysis import contiguous_axis
from tilecraft.te.expr import AxisKind


def matmul(m: int = 64, k: int = 32, n: int = 48) -> te.Tensor:
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis(k, name="k")
    return te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")


def test_matmul_numbers_and_structure_as_in_figure_4_3() -> None:
    info = analyze(matmul())
    assert info.num_nodes == 1 and info.anchor == "C" and info.name == "C"
    assert info.inputs == ("A", "B") and info.outputs == ("C",)
    node = info.node()
    assert (node.num_spatial, node.num_reduce) == (2, 1)
    assert node.spatial_trip_counts == (64, 48) and node.reduce_trip_counts == (32,)
    assert node.order == ("i", "j", "k")
    assert [loop.kind for loop in node.loops] == [AxisKind.SPATIAL, AxisKind.SPATIAL,
                                                  AxisKind.REDUCE]
    assert (node.num_inputs, node.num_outputs, node.num_consumers) == (2, 1, 0)
    assert node.iterations == 64 * 48 * 32
    assert node.is_output and not node.inlineable and not node.is_elementwise
    assert node.contiguous_axis == "j"
    assert node.dtype == "float32"


def test_conv2d_with_pad_producer() -> None:
    graph, _ = catalog.get("conv2d[stride2-pad1-c3]").build()
    info = analyze(graph)
    assert [n.name for n in info.nodes] == ["out_pad", "out"]
    assert info.anchor == "out" and info.inputs == ("x", "w")
    pad, conv = info.nodes
    assert pad.consumers == ("out",) and pad.num_consumers == 1 and pad.num_inputs == 1
    assert pad.is_elementwise and pad.inlineable and not pad.is_output
    assert conv.num_inputs == 2 and conv.num_consumers == 0
    assert conv.spatial_trip_counts == (1, 4, 4, 4) and conv.reduce_trip_counts == (3, 3, 3)
    assert info.inlineable == ("out_pad",)


def test_softmax_five_nodes_and_only_single_consumer_elementwise_nodes_inline() -> None:
    graph, _ = catalog.get("softmax[7x13]").build()
    info = analyze(graph)
    assert info.num_nodes == 5
    by_name = {n.name: n for n in info.nodes}
    assert by_name["out_exp"].num_consumers == 2  # the sum and the division read it
    assert not by_name["out_exp"].inlineable       # two consumers
    assert not by_name["out_max"].inlineable       # a reduction
    assert by_name["out_sub"].inlineable
    assert info.inlineable == ("out_sub",)
    assert by_name["out_max"].contiguous_axis == by_name["out_max"].reduce[0].name


def test_an_output_read_by_another_compute_is_not_inlineable() -> None:
    x = te.placeholder((5, 7), name="x")
    y = te.compute((5, 7), lambda i, j: x[i, j] + 1.0, name="y")
    z = te.compute((5, 7), lambda i, j: y[i, j] * 2.0, name="z")
    info = analyze([z, y])
    assert info.outputs == ("z", "y") and info.anchor == "z"
    assert info.node("y").is_output and not info.node("y").inlineable
    assert analyze(z).node("y").inlineable


def test_contiguous_axis_rules() -> None:
    # gemv: no load walks along i, the reduce axis k is contiguous and longer: vectorise k
    A = te.placeholder((13, 17), name="A")
    x = te.placeholder((17,), name="x")
    k = te.reduce_axis(17, name="k")
    gemv = te.compute((13,), lambda i: te.sum(A[i, k] * x[k], axis=k), name="y")
    assert contiguous_axis(gemv) == "k"
    # the same with a longer output dimension stays on the spatial axis
    A2 = te.placeholder((64, 3), name="A2")
    k2 = te.reduce_axis(3, name="k2")
    tall = te.compute((64,), lambda i: te.sum(A2[i, k2], axis=k2), name="t")
    assert contiguous_axis(tall) == "i"
    # trailing size-1 axes are skipped; a stride-1 conv walks along its output width
    image = te.placeholder((1, 2, 9, 9), name="image")
    weight = te.placeholder((3, 2, 3, 3), name="weight")
    conv = ops.conv2d(image, weight, name="conv")
    assert analyze(conv).node("conv").contiguous_axis == "w"
    column = te.compute((6, 1), lambda i, j: A[i, j] * 2.0, name="col")
    assert contiguous_axis(column) == "i"
    # a global reduction to one element vectorises its reduce axis
    total_axis = te.reduce_axis(17, name="r")
    total = te.compute((1,), lambda i: te.sum(x[total_axis], axis=total_axis), name="total")
    assert contiguous_axis(total) == "r"
    one = te.placeholder((1,), name="one")
    assert contiguous_axis(te.compute((1,), lambda i: one[i] + 1.0, name="inc")) is None


def test_accepts_graphs_tensors_lists_and_analyses() -> None:
    C = matmul()
    first = analyze(C)
    assert analyze(Graph.from_outputs([C])) == first
    assert analyze([C]) == first
    assert analyze(first) is first


def test_printable_comparable_and_picklable() -> None:
    graph, _ = catalog.get("dense[n13-in17-out19-bias]").build()
    info = analyze(graph)
    text = str(info)
    assert text.splitlines()[0] == "operator out: 2 nodes, inputs x, W, bias, outputs out"
    assert "out_matmul: spatial i=13 j=19, reduce k=17" in text
    assert "consumers 1" in text
    assert pickle.loads(pickle.dumps(info)) == info
    assert isinstance(info, OperatorAnalysis)
    with pytest.raises(AttributeError):
        info.anchor = "other"  # type: ignore[misc]


def test_bad_input_is_named() -> None:
    with pytest.raises(SearchError, match="takes a Graph, a Tensor or a list"):
        analyze(42)  # type: ignore[arg-type]
    with pytest.raises(SearchError, match="has no compute node 'nope'; its nodes are C"):
        analyze(matmul()).node("nope")
    with pytest.raises(SearchError, match="has no loop 'z'; its loops are i, j, k"):
        analyze(matmul()).node().loop("z")
    A = te.placeholder((3,), name="A")
    with pytest.raises(SearchError, match="computes nothing"):
        analyze(Graph.from_outputs([A]))


@pytest.mark.parametrize("case", catalog.standard_set(), ids=lambda c: c.id)
def test_every_standard_operator_analyses_consistently(case: catalog.OpCase) -> None:
    graph, _ = case.build()
    info = analyze(graph)
    assert [n.name for n in info.nodes] == [t.name for t in graph.computes]
    for node, tensor in zip(info.nodes, graph.computes):
        assert node.spatial_trip_counts == tensor.shape
        assert node.reduce_trip_counts == tuple(a.extent for a in tensor.reduce_axes)
        assert node.num_consumers == len(graph.consumers(tensor))
        assert node.inputs == tuple(t.name for t in tensor.inputs)
        if node.inlineable:
            assert node.is_elementwise and node.num_consumers == 1 and not node.is_output
        assert node.contiguous_axis is None or node.contiguous_axis in node.order
