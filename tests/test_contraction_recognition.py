"""Contraction recognition (:mod:`tilecraft.passes.contraction`): which computes are a batched
matrix product, how their axes sort into batch / m / n / k, and which are dot-product
contractions of int8 or bfloat16 operands."""

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.passes.contraction import as_contraction, as_dot_product_contraction


def test_matmul_axes_sort_into_m_n_k():
    A = te.placeholder((6, 5), name="A")
    B = te.placeholder((5, 7), name="B")
    c = as_contraction(ops.matmul(A, B))
    assert c.a.tensor is A and c.b.tensor is B
    assert [a.name for a in c.m_axes] == ["i"] and [a.name for a in c.n_axes] == ["j"]
    assert c.extents() == (1, 6, 7, 5) and c.flops == 2 * 6 * 7 * 5
    # float32 only by default: an int32 product is no float32 contraction
    i32 = te.placeholder((6, 5), "int32", name="I")
    assert as_contraction(ops.matmul(i32, te.placeholder((5, 7), "int32", name="J"))) is None


def test_not_a_contraction():
    A = te.placeholder((4, 4), name="A")
    assert as_contraction(ops.relu(A)) is None
    assert as_contraction(ops.softmax(A)) is None
    # output laid out [n, m]: the trailing axis is indexed by A, so A is the n side
    B = te.placeholder((4, 5), name="B")
    k = te.reduce_axis(4, name="k")
    T = te.compute((5, 4), lambda j, i: te.sum(A[i, k] * B[k, j], axis=k), name="T")
    c = as_contraction(T)
    assert c.b.tensor is A and [a.name for a in c.n_axes] == ["i"]


def test_recognises_int8_and_bf16_contractions():
    u8 = te.placeholder((6, 10), "uint8", name="A")
    s8 = te.placeholder((10, 7), "int8", name="B")
    dot = as_dot_product_contraction(ops.matmul(u8, s8, out_dtype="int32"))
    assert (dot.group, dot.accumulator, dot.a_dtype, dot.b_dtype) == \
        (4, DType.INT32, DType.UINT8, DType.INT8)
    a_bf = te.placeholder((6, 10), "bfloat16", name="X")
    b_bf = te.placeholder((10, 7), "bfloat16", name="Y")
    for out, acc in ((None, DType.FLOAT32), ("float32", DType.FLOAT32)):
        dot = as_dot_product_contraction(ops.matmul(a_bf, b_bf, out_dtype=out))
        assert dot.group == 2 and dot.accumulator is acc
    image = te.placeholder((1, 3, 9, 9), "uint8", name="image")
    weight = te.placeholder((8, 3, 3, 3), "int8", name="weight")
    dot = as_dot_product_contraction(ops.conv2d(image, weight, padding=1, out_dtype="int32"))
    assert [a.name for a in dot.contraction.n_axes] == ["h", "w"]
    assert dot.a_dtype is DType.INT8 and len(dot.contraction.k_axes) == 3


def test_rejects_what_is_not_a_dot_product_contraction():
    f32 = te.placeholder((6, 10), name="F")
    g32 = te.placeholder((10, 7), name="G")
    assert as_dot_product_contraction(ops.matmul(f32, g32)) is None      # float32: outer product
    assert as_dot_product_contraction(ops.relu(f32)) is None
    s8 = te.placeholder((6, 10), "int8", name="S")
    t8 = te.placeholder((10, 7), "int8", name="T")
    assert as_dot_product_contraction(ops.matmul(s8, t8, out_dtype="int8")) is None  # wraps in int8
    i32 = te.placeholder((10, 7), "int32", name="I")
    assert as_dot_product_contraction(ops.matmul(s8, i32, out_dtype="int32")) is None
    a_bf = te.placeholder((6, 10), "bfloat16", name="X")
    assert as_dot_product_contraction(ops.matmul(a_bf, g32, out_dtype="float32")) is None
    k = te.reduce_axis(10, "k")
    # a product of a load and a non-load (here: with a zero point folded in) is not recognised
    zp = te.compute((6, 7), lambda i, j: te.sum(
        (s8[i, k].astype("int32") - 3) * t8[k, j].astype("int32"), axis=k), name="ZP")
    assert as_dot_product_contraction(zp) is None
    # a max-reduction is no product-sum
    mx = te.compute((6, 7), lambda i, j: te.max(
        s8[i, k].astype("int32") * t8[k, j].astype("int32"), axis=k), name="MX")
    assert as_dot_product_contraction(mx) is None
