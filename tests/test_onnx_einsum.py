"""ops.einsum against numpy's einsum, its refusals, and ONNX Einsum through the importer."""

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import ShapeError

CASES = [
    ("ij,jk->ik", [(3, 5), (5, 7)]),
    ("ij,jk", [(2, 3), (3, 1)]),            # implicit output
    ("bij,bjk->bik", [(2, 3, 5), (2, 5, 4)]),
    ("ii->i", [(5, 5)]),                    # diagonal
    ("ii", [(3, 3)]),                       # trace, a 0-d result
    ("i,i", [(7,), (7,)]),                  # dot
    ("i,j->ij", [(3,), (2,)]),              # outer
    ("ij->ji", [(1, 5)]),
    ("ij->", [(4, 3)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),   # broadcast batch, size 1 stretched
    ("i...->...", [(3, 2, 5)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),  # attention scores
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,j", [(3, 1), (4,)]),               # a letter of extent 1 broadcasts
    ("Ab,bA->A", [(3, 2), (2, 3)]),
]


@pytest.mark.parametrize(("equation", "shapes"), CASES)
def test_einsum_matches_numpy(equation, shapes):
    rng = np.random.default_rng(len(equation))
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    tensors = [te.placeholder(s, name=f"x{n}") for n, s in enumerate(shapes)]
    out = ops.einsum(equation, *tensors, name="y")
    want = np.einsum(equation, *arrays)
    assert out.shape == want.shape
    got = tc.reference.run(tc.Graph.from_outputs([out]),
                           inputs={f"x{n}": a for n, a in enumerate(arrays)})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_integer_einsum_is_exact():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    x = te.placeholder((3, 4), "int32", name="x")
    got = tc.reference.run(tc.Graph.from_outputs([ops.einsum("ij,ij->j", x, x, name="y")]),
                           x=a)
    np.testing.assert_array_equal(got, np.einsum("ij,ij->j", a, a))


@pytest.mark.parametrize(("equation", "shapes", "message"), [
    ("ij,jk->ik", [(2, 3)], "2 input term"),
    ("ijk->i", [(2, 3)], "names 3 dimension"),
    ("ij,jk->ik", [(2, 3), (4, 5)], "extent 3 in one operand and 4"),
    ("ii->i", [(2, 3)], "diagonal needs equal extents"),
    ("ij->ii", [(2, 2)], "names 'i' twice"),
    ("ij->k", [(2, 2)], "'k' is in no input term"),
    ("...i->i", [(2, 2)], "missing from the output"),
    ("i1->i", [(2, 2)], "not a subscript"),
    ("i..j->i", [(2, 2)], "stray"),
    ("i->i->i", [(2,)], "more than one"),
])
def test_bad_equations_are_named(equation, shapes, message):
    tensors = [te.placeholder(s, name=f"x{n}") for n, s in enumerate(shapes)]
    with pytest.raises(ShapeError, match=message):
        ops.einsum(equation, *tensors)


def test_mixed_dtypes_need_out_dtype():
    a = te.placeholder((2, 3), "int8", name="a")
    b = te.placeholder((3,), "int32", name="b")
    with pytest.raises(ShapeError, match="different dtypes"):
        ops.einsum("ij,j->i", a, b)
    assert ops.einsum("ij,j->i", a, b, out_dtype="int32").dtype.value == "int32"


def test_onnx_einsum_imports_and_matches_numpy():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij, bjk -> bik")
    graph = helper.make_graph(
        [node], "einsum",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 5]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 5, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 5)).astype(np.float32)
    b = rng.standard_normal((2, 5, 4)).astype(np.float32)
    got = tc.reference.run(tc.from_onnx(model), a=a, b=b)
    np.testing.assert_allclose(got, np.einsum("bij,bjk->bik", a, b), rtol=1e-5, atol=1e-5)
