"""int8 / bfloat16 contractions lowered onto dot-product micro-kernels match the reference
(interpreted, with the micro-kernels' declared semantics): exact for integers."""

import numpy as np
import pytest
from tilecraft_x86_avx512.blocking.dot_product import (
    Blocking,
    as_dot_product_contraction,
    lower_dot_product_contraction,
)

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower.options import LoweringOptions
from tilecraft.reference import run
from tilecraft.target.microkernel import MicroKernelDecl

OPTIONS = LoweringOptions(vector_lanes=16, cores=2)


def _decl(name, a, b, c, group):
    return MicroKernelDecl(
        name=name, template="t/dot.jinja",
        semantics=f"C[m, n] += cast({c}, A[m, kg, g]) * cast({c}, B[kg, n, g])",
        loops=[{"name": "m", "extent": "MI", "kind": "spatial"},
               {"name": "n", "extent": "NR", "kind": "spatial"},
               {"name": "kg", "extent": "KG", "kind": "reduce"},
               {"name": "g", "extent": group, "kind": "reduce"}],
        operands=[{"name": "A", "role": "src", "dtype": a, "shape": ["MI", "KG", group],
                   "index": ["m", "kg", "g"]},
                  {"name": "B", "role": "src", "dtype": b, "shape": ["KG", "NR", group],
                   "index": ["kg", "n", "g"]},
                  {"name": "C", "role": "dst", "dtype": c, "shape": ["MI", "NR"],
                   "index": ["m", "n"]}],
        parameters={"MI": {"default": 2}, "NR": {"default": 8}, "KG": {"default": 2}})


DECLS = [_decl("dot_u8s8", "uint8", "int8", "int32", 4),
         _decl("dot_s8u8", "int8", "uint8", "int32", 4),
         _decl("dot_bf16", "bfloat16", "bfloat16", "float32", 2)]
SEMANTICS = {d.name: d.reference for d in DECLS}
#: (A dtype, B dtype) -> (micro-kernel, dtype A is packed in): B's signedness picks the kernel
KERNEL_FOR = {("uint8", "int8"): ("dot_u8s8", "uint8"), ("int8", "int8"): ("dot_u8s8", "uint8"),
              ("int8", "uint8"): ("dot_s8u8", "int8"), ("uint8", "uint8"): ("dot_s8u8", "int8")}


def _data(tensor, rng):
    if tensor.dtype is DType.UINT8:
        return rng.integers(0, 256, tensor.shape).astype(np.uint8)
    if tensor.dtype is DType.INT8:
        return rng.integers(-128, 128, tensor.shape).astype(np.int8)
    return rng.standard_normal(tensor.shape).astype(tensor.dtype.numpy)


def _run(tensor, blocking, rng, micro_kernel=None, packed_a=None):
    """Lower, interpret with the declared semantics, compare with the reference; the kernels."""
    dot = as_dot_product_contraction(tensor)
    assert dot is not None
    if micro_kernel is None:
        micro_kernel, packed_a = KERNEL_FOR.get((dot.a_dtype.value, dot.b_dtype.value),
                                                ("dot_bf16", None))
    kernels = lower_dot_product_contraction(dot, micro_kernel, blocking, OPTIONS, packed_a=packed_a)
    graph = Graph.from_outputs([tensor])
    inputs = {t.name: _data(t, rng) for t in graph.inputs}
    arrays = dict(inputs)
    for producer in graph.computes[:-1]:  # a convolution's pad
        arrays[producer.name] = run(producer, {t.name: inputs[t.name]
                                               for t in Graph.from_outputs([producer]).inputs})
    for kernel in kernels:  # flat views of A / B (e.g. a weight viewed [O, C*R*S])
        for param in kernel.params:
            if param.name in arrays and arrays[param.name].shape != param.shape:
                arrays[param.name] = arrays[param.name].reshape(param.shape)
    out_view = kernels[-1].param(tensor.name)
    arrays[tensor.name] = np.zeros(out_view.shape, tensor.dtype.numpy)
    got = run_kernels(kernels, arrays, semantics=SEMANTICS)[tensor.name].reshape(tensor.shape)
    expected = run(tensor, inputs)
    if tensor.dtype.is_int:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                                   rtol=1e-2, atol=1e-2)
    return kernels


# int8, every signedness, awkward shapes --------------------------------------------------------
@pytest.mark.parametrize("a_dtype, b_dtype", list(KERNEL_FOR))
@pytest.mark.parametrize("m, n, k", [(7, 19, 11), (1, 16, 4), (13, 5, 1), (5, 23, 37)])
def test_int8_matmul_exact(a_dtype, b_dtype, m, n, k):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    A = te.placeholder((m, k), a_dtype, name="A")
    B = te.placeholder((k, n), b_dtype, name="B")
    kernels = _run(ops.matmul(A, B, out_dtype="int32", name="C"),
                   Blocking(mi=3, nr=8, kc=8, mc=6), rng)
    shifted = a_dtype == b_dtype
    assert ("C_bcomp" in kernels[0].outputs) == shifted  # compensation only when A is shifted


def test_compensation_is_minus_shift_times_column_sums():
    rng = np.random.default_rng(1)
    A = te.placeholder((4, 9), "int8", name="A")
    B = te.placeholder((9, 10), "int8", name="B")
    dot = as_dot_product_contraction(ops.matmul(A, B, name="C"))
    pack = lower_dot_product_contraction(dot, "dot_u8s8", Blocking(mi=2, nr=8, kc=12, mc=2),
                                         OPTIONS, packed_a="uint8")[0]
    b = rng.integers(-128, 128, (9, 10)).astype(np.int8)
    out = run_kernels([pack], {"B": b})
    comp = out["C_bcomp"].reshape(-1)[:10]             # panels of 8 columns, zero-padded
    np.testing.assert_array_equal(comp, -128 * b.astype(np.int32).sum(axis=0))
    packed = out["C_bpacked"]                           # [1, panels, KG, NR, 4]
    assert packed.shape == (1, 2, 3, 8, 4)
    np.testing.assert_array_equal(packed[0, 0, 0, :, :].T, b[0:4, 0:8])
    assert not packed[0, :, 2, :, 1:].any()             # k = 9, 10, 11: zero padding


def test_dense_batch_matmul_and_one_by_one_tiles():
    rng = np.random.default_rng(2)
    D = te.placeholder((9, 13), "uint8", name="D")
    W = te.placeholder((21, 13), "int8", name="W")       # k contiguous in B: the copy path
    _run(ops.dense(D, W, out_dtype="int32", name="E"), Blocking(mi=2, nr=8, kc=8, mc=4), rng)
    X = te.placeholder((3, 5, 7), "int8", name="X")
    Y = te.placeholder((3, 7, 18), "int8", name="Y")
    kernels = _run(ops.batch_matmul(X, Y, name="Z"), Blocking(mi=2, nr=16, kc=4, mc=2), rng)
    assert kernels[0].param("Z_bpacked").shape[0] == 3   # B is batched
    P = te.placeholder((1, 6), "uint8", name="P")
    Q = te.placeholder((6, 8), "int8", name="Q")
    _run(ops.matmul(P, Q, out_dtype="int32", name="R"), Blocking(mi=1, nr=8, kc=4, mc=1), rng)


@pytest.mark.parametrize("stride, padding, x_dtype", [(1, 1, "uint8"), (2, 1, "uint8"),
                                                      (1, 0, "int8")])
def test_int8_conv2d_through_im2col_exact(stride, padding, x_dtype):
    rng = np.random.default_rng(stride * 10 + padding)
    image = te.placeholder((1, 5, 9, 7), x_dtype, name="image")
    weight = te.placeholder((6, 5, 3, 3), "int8", name="weight")
    conv = ops.conv2d(image, weight, padding=padding, stride=stride, out_dtype="int32",
                      name="conv")
    kernels = _run(conv, Blocking(mi=2, nr=8, kc=12, mc=4), rng)
    # the im2col rows are written by the packing itself, unless it sums columns (A shifted)
    assert [k.name for k in kernels] == (["conv_bpacked_pack", "conv"] if x_dtype == "uint8"
                                         else ["conv_bcols_im2col", "conv_bpacked_pack", "conv"])
    # the weight is read through its flat [O, C*R*S] view: k is contiguous
    assert kernels[-1].param("weight").shape == (6, 45)


def _allocated(stmt, found=None):
    """Names of the buffers a kernel body allocates."""
    from tilecraft.kernel_ir.nodes import Allocate, For, IfThenElse, Seq

    found = set() if found is None else found
    if isinstance(stmt, Allocate):
        found.add(stmt.buffer.name)
        _allocated(stmt.body, found)
    elif isinstance(stmt, For):
        _allocated(stmt.body, found)
    elif isinstance(stmt, Seq):
        for part in stmt.stmts:
            _allocated(part, found)
    elif isinstance(stmt, IfThenElse):
        _allocated(stmt.then_body, found)
        if stmt.else_body is not None:
            _allocated(stmt.else_body, found)
    return found


def test_a_is_read_in_place_when_already_rows_of_groups():
    """No shift, 4 | K, one slice: the micro-kernel reads A as [rows, K/4, 4] where it lies,
    a ragged last strip (7 = 2*3 + 1 rows) too: a call with MI = 1, nothing packed."""
    rng = np.random.default_rng(8)
    A = te.placeholder((7, 12), "uint8", name="A")
    B = te.placeholder((12, 20), "int8", name="B")
    kernels = _run(ops.matmul(A, B, out_dtype="int32", name="C"),
                   Blocking(mi=3, nr=8, kc=12, mc=3), rng)
    assert kernels[-1].param("A").shape == (7, 3, 4)
    assert "C_apacked" not in _allocated(kernels[-1].body)
    A6 = te.placeholder((6, 12), "uint8", name="A6")
    kernels = _run(ops.matmul(A6, B, out_dtype="int32", name="D"),
                   Blocking(mi=3, nr=8, kc=12, mc=3), rng)
    assert "D_apacked" not in _allocated(kernels[-1].body)   # whole strips: nothing packed
    X = te.placeholder((3, 5, 8), "uint8", name="X")
    Y = te.placeholder((3, 8, 18), "int8", name="Y")
    kernels = _run(ops.batch_matmul(X, Y, out_dtype="int32", name="Z"),
                   Blocking(mi=2, nr=16, kc=8, mc=2), rng)
    assert kernels[-1].param("X").shape == (15, 2, 4)        # batch x rows
    image = te.placeholder((1, 4, 8, 8), "uint8", name="image")
    weight = te.placeholder((5, 4, 3, 3), "int8", name="weight")
    kernels = _run(ops.conv2d(image, weight, padding=1, out_dtype="int32", name="conv"),
                   Blocking(mi=2, nr=16, kc=36, mc=2), rng)
    assert kernels[-1].param("weight").shape == (5, 9, 4)
    # a shifted A (int8 x int8) or a padded k is packed
    S = te.placeholder((6, 12), "int8", name="S")
    T = te.placeholder((12, 20), "int8", name="T")
    kernels = _run(ops.matmul(S, T, name="U"), Blocking(mi=3, nr=8, kc=12, mc=3), rng)
    assert kernels[-1].param("S").shape == (6, 12)


@pytest.mark.parametrize("out_dtype", [None, "float32"])
def test_bf16_matmul(out_dtype):
    rng = np.random.default_rng(3)
    A = te.placeholder((7, 11), "bfloat16", name="A")
    B = te.placeholder((11, 20), "bfloat16", name="B")
    kernels = _run(ops.matmul(A, B, out_dtype=out_dtype, name="C"),
                   Blocking(mi=3, nr=16, kc=4, mc=6), rng, "dot_bf16")
    # a bfloat16 result is summed in a float32 workspace and rounded once
    assert ("C_acc" in kernels[-1].outputs) == (out_dtype is None)


def test_errors_name_the_culprit():
    A = te.placeholder((4, 8), "bfloat16", name="A")
    B = te.placeholder((8, 16), "bfloat16", name="B")
    dot = as_dot_product_contraction(ops.matmul(A, B))
    with pytest.raises(LoweringError, match="bfloat16 cannot be packed as int8"):
        lower_dot_product_contraction(dot, "dot_bf16", Blocking(mi=2, nr=16, kc=4, mc=2), OPTIONS,
                                      packed_a="int8")
    with pytest.raises(LoweringError, match="mc = 3 must be a multiple of mi = 2"):
        Blocking(mi=2, nr=16, kc=4, mc=3)
