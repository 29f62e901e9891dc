"""The int8 paths of the dot-product lowering added for speed, interpreted with the declared
semantics and compared exactly with the reference: B shifted instead of A (compensated by A's
row sums: through a row-sum micro-kernel, or a kernel of its own), whole tiles in a local
register tile, and the group-major packing of B (ragged last panels zero-filled)."""

import numpy as np
import pytest
from tilecraft_x86_avx512.blocking.dot_product import (
    Blocking,
    as_dot_product_contraction,
    lower_dot_product_contraction,
    reads_a_in_place,
)
from tilecraft_x86_avx512.blocking.dot_product_packing import pack_b_kernel

from tilecraft import ops, te
from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.kernel_ir.nodes import Allocate, For, IfThenElse, MicroKernelCall, Seq
from tilecraft.lower.options import LoweringOptions
from tilecraft.reference import run
from tilecraft.target.microkernel import MicroKernelDecl

OPTIONS = LoweringOptions(vector_lanes=16, cores=2)


def _dot(name, a, b):
    return MicroKernelDecl(
        name=name, template="t/dot.jinja",
        semantics="C[m, n] += cast(int32, A[m, kg, g]) * cast(int32, B[kg, n, g])",
        loops=[{"name": "m", "extent": "MI", "kind": "spatial"},
               {"name": "n", "extent": "NR", "kind": "spatial"},
               {"name": "kg", "extent": "KG", "kind": "reduce"},
               {"name": "g", "extent": 4, "kind": "reduce"}],
        operands=[{"name": "A", "role": "src", "dtype": a, "shape": ["MI", "KG", 4],
                   "index": ["m", "kg", "g"]},
                  {"name": "B", "role": "src", "dtype": b, "shape": ["KG", "NR", 4],
                   "index": ["kg", "n", "g"]},
                  {"name": "C", "role": "dst", "dtype": "int32", "shape": ["MI", "NR"],
                   "index": ["m", "n"]}],
        parameters={"MI": {"default": 2}, "NR": {"default": 8}, "KG": {"default": 2}})


def _row_sums(name, a):
    return MicroKernelDecl(
        name=name, template="t/rows.jinja", semantics="S[m] += cast(int32, A[m, kg, g])",
        loops=[{"name": "m", "extent": "MI", "kind": "spatial"},
               {"name": "kg", "extent": "KG", "kind": "reduce"},
               {"name": "g", "extent": 4, "kind": "reduce"}],
        operands=[{"name": "A", "role": "src", "dtype": a, "shape": ["MI", "KG", 4],
                   "index": ["m", "kg", "g"]},
                  {"name": "S", "role": "dst", "dtype": "int32", "shape": ["MI"],
                   "index": ["m"]}],
        parameters={"MI": {"default": 2}, "KG": {"default": 2}})


DECLS = [_dot("dot_u8s8", "uint8", "int8"), _dot("dot_s8u8", "int8", "uint8"),
         _row_sums("rows_s8", "int8"), _row_sums("rows_u8", "uint8")]
SEMANTICS = {d.name: d.reference for d in DECLS}
#: (A, B) of the same signedness, B shifted: (micro-kernel, dtype B is packed in, row sums)
SHIFT_B = {("int8", "int8"): ("dot_s8u8", "uint8", "rows_s8"),
           ("uint8", "uint8"): ("dot_u8s8", "int8", "rows_u8")}


def _data(tensor, rng):
    if tensor.dtype.value == "uint8":
        return rng.integers(0, 256, tensor.shape).astype(np.uint8)
    return rng.integers(-128, 128, tensor.shape).astype(np.int8)


def _check(tensor, blocking, rng, row_sums=True):
    """Lower with B shifted, interpret, compare exactly with the reference; the kernels."""
    dot = as_dot_product_contraction(tensor)
    micro_kernel, packed_b, rows = SHIFT_B[(dot.a_dtype.value, dot.b_dtype.value)]
    kernels = lower_dot_product_contraction(dot, micro_kernel, blocking, OPTIONS, packed_b=packed_b,
                                            row_sums_micro_kernel=rows if row_sums else None)
    graph = Graph.from_outputs([tensor])
    inputs = {t.name: _data(t, rng) for t in graph.inputs}
    arrays = dict(inputs)
    for producer in graph.computes[:-1]:   # a convolution's pad
        arrays[producer.name] = run(producer, {t.name: inputs[t.name] for t in
                                               Graph.from_outputs([producer]).inputs})
    for kernel in kernels:
        for param in kernel.params:
            if param.name in arrays and arrays[param.name].shape != param.shape:
                arrays[param.name] = arrays[param.name].reshape(param.shape)
    got = run_kernels(kernels, arrays, semantics=SEMANTICS)[tensor.name].reshape(tensor.shape)
    np.testing.assert_array_equal(got, run(tensor, inputs))
    return kernels


def _calls(stmt, found=None):
    """Names of the micro-kernels a statement calls and of the buffers it allocates."""
    found = set() if found is None else found
    if isinstance(stmt, MicroKernelCall):
        found.add(stmt.micro_kernel)
    elif isinstance(stmt, Allocate):
        found.add(stmt.buffer.name)
        _calls(stmt.body, found)
    elif isinstance(stmt, For):
        _calls(stmt.body, found)
    elif isinstance(stmt, Seq):
        for part in stmt.stmts:
            _calls(part, found)
    elif isinstance(stmt, IfThenElse):
        _calls(stmt.then_body, found)
        if stmt.else_body is not None:
            _calls(stmt.else_body, found)
    return found


# B shifted, A read in place: row sums by the micro-kernel ------------------------------------
@pytest.mark.parametrize("a_dtype", ["int8", "uint8"])
@pytest.mark.parametrize("m, n, k, blocking", [
    (7, 19, 12, Blocking(mi=3, nr=8, kc=12, mc=6)),     # ragged strip and panel, one slice
    (1, 16, 4, Blocking(mi=1, nr=16, kc=4, mc=1)),      # one row, one group
    (13, 5, 8, Blocking(mi=2, nr=8, kc=8, mc=4)),       # N below one panel
    (11, 23, 24, Blocking(mi=3, nr=8, kc=8, mc=6)),     # three k slices (C reloaded)
    (5, 17, 36, Blocking(mi=5, nr=16, kc=36, mc=5)),    # whole strips only
    (9, 40, 16, Blocking(mi=3, nr=32, kc=16, mc=6))])   # last panel: 8 of 32 columns
def test_b_shifted_with_row_sum_micro_kernel_exact(a_dtype, m, n, k, blocking):
    rng = np.random.default_rng(m * 100 + n + k)
    A = te.placeholder((m, k), a_dtype, name="A")
    B = te.placeholder((k, n), a_dtype, name="B")
    kernels = _check(ops.matmul(A, B, out_dtype="int32", name="C"), blocking, rng)
    assert [kernel.name for kernel in kernels] == ["C_bpacked_pack", "C"]
    assert kernels[-1].param("A").shape == (m, k // 4, 4)   # read in place, not packed
    assert kernels[0].param("C_bpacked").dtype.value != a_dtype   # B changed signedness
    used = _calls(kernels[-1].body)
    assert {"C_arowcomp", SHIFT_B[(a_dtype, a_dtype)][2]} <= used
    assert "C_bcomp" not in kernels[0].outputs


@pytest.mark.parametrize("m, n, k", [(7, 19, 11), (6, 9, 3), (2, 3, 1)])
def test_b_shifted_with_padded_k_sums_rows_in_a_kernel(m, n, k):
    """4 does not divide K: A is packed (zero-padded), its row sums come from a kernel."""
    rng = np.random.default_rng(m + n + k)
    A = te.placeholder((m, k), "int8", name="A")
    B = te.placeholder((k, n), "int8", name="B")
    kernels = _check(ops.matmul(A, B, name="C"), Blocking(mi=3, nr=8, kc=8, mc=3), rng)
    assert [kernel.name for kernel in kernels] == ["C_bpacked_pack", "C_arowcomp_sum", "C"]


def test_b_shifted_without_row_sum_micro_kernel():
    rng = np.random.default_rng(5)
    A = te.placeholder((9, 16), "uint8", name="A")
    B = te.placeholder((16, 20), "uint8", name="B")
    kernels = _check(ops.matmul(A, B, out_dtype="int32", name="C"),
                     Blocking(mi=2, nr=16, kc=16, mc=4), rng, row_sums=False)
    assert [kernel.name for kernel in kernels] == ["C_bpacked_pack", "C_arowcomp_sum", "C"]


def test_b_shifted_batch_matmul_and_int8_conv():
    rng = np.random.default_rng(6)
    X = te.placeholder((3, 5, 8), "int8", name="X")
    Y = te.placeholder((3, 8, 18), "int8", name="Y")
    kernels = _check(ops.batch_matmul(X, Y, name="Z"), Blocking(mi=2, nr=16, kc=8, mc=2), rng)
    assert kernels[-1].param("X").shape == (15, 2, 4)    # batch x rows, in place
    # int8 activations and weights: the weights (A) in place, the im2col matrix shifted
    image = te.placeholder((1, 4, 7, 9), "int8", name="image")
    weight = te.placeholder((6, 4, 3, 3), "int8", name="weight")
    kernels = _check(ops.conv2d(image, weight, padding=1, stride=2, out_dtype="int32",
                                name="conv"), Blocking(mi=4, nr=8, kc=36, mc=4), rng)
    assert [k.name for k in kernels] == ["conv_bpacked_pack", "conv"]   # im2col rows fused
    assert "through im2col rows" in kernels[0].attrs["schedule"]
    assert kernels[-1].param("weight").shape == (6, 9, 4)


def test_reads_a_in_place():
    A = te.placeholder((5, 12), "int8", name="A")
    B = te.placeholder((12, 20), "int8", name="B")
    dot = as_dot_product_contraction(ops.matmul(A, B))
    assert reads_a_in_place(dot, 12, OPTIONS) and reads_a_in_place(dot, 4, OPTIONS)
    assert not reads_a_in_place(dot, 8, OPTIONS)          # slices of 8 pad k to 16
    At = te.placeholder((12, 5), "int8", name="At")      # k not A's contiguous axis
    k = te.reduce_axis(12, "k")
    transposed = te.compute((5, 20), lambda i, j: te.sum(
        At[k, i].astype("int32") * B[k, j].astype("int32"), axis=k), name="T")
    assert not reads_a_in_place(as_dot_product_contraction(transposed), 12, OPTIONS)
    odd = te.placeholder((5, 10), "int8", name="O")
    C = te.placeholder((10, 20), "int8", name="P")
    assert not reads_a_in_place(as_dot_product_contraction(ops.matmul(odd, C)), 12, OPTIONS)


def test_shifting_both_operands_is_refused():
    A = te.placeholder((4, 8), "int8", name="A")
    B = te.placeholder((8, 16), "int8", name="B")
    dot = as_dot_product_contraction(ops.matmul(A, B, name="C"))
    with pytest.raises(LoweringError, match="compute C: both operands would be shifted"):
        lower_dot_product_contraction(dot, "dot_u8s8", Blocking(mi=2, nr=16, kc=8, mc=2), OPTIONS,
                                      packed_a="uint8", packed_b="uint8")
    with pytest.raises(LoweringError, match="int8 cannot be packed as int32"):
        I32 = te.placeholder((8, 16), "int32", name="I")
        pack_b_kernel(dot, 16, 8, 0, OPTIONS, packed_b=I32.dtype)


# packing of B ------------------------------------------------------------------------------
@pytest.mark.parametrize("n, k, nr, kc", [(40, 10, 16, 12), (16, 8, 16, 8), (5, 3, 8, 4),
                                          (33, 17, 16, 8)])
def test_pack_b_group_major_layout_shift_and_padding(n, k, nr, kc):
    """packed[0, jb, kg, jn, g] = B[4 kg + g, jb nr + jn] (+128 when shifted); the ragged last
    panel and the padded k are zero."""
    rng = np.random.default_rng(n * k)
    A = te.placeholder((4, k), "int8", name="A")
    B = te.placeholder((k, n), "int8", name="B")
    dot = as_dot_product_contraction(ops.matmul(A, B, name="C"))
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    for packed_b in (None, dot.b_dtype.__class__("uint8")):
        kernel = pack_b_kernel(dot, nr, kc, 0, OPTIONS, packed_b=packed_b)
        assert kernel.attrs["schedule"].endswith("group-major")
        packed = run_kernels([kernel], {"B": b})["C_bpacked"]
        panels, groups = packed.shape[1], packed.shape[2]
        expected = np.zeros((groups * 4, panels * nr), np.int32)
        expected[:k, :n] = b.astype(np.int32) + (128 if packed_b is not None else 0)
        got = packed[0].astype(np.int32).transpose(1, 3, 0, 2).reshape(groups * 4, panels * nr)
        np.testing.assert_array_equal(got, expected)


def test_pack_b_with_column_sums_stays_panel_major():
    A = te.placeholder((4, 9), "int8", name="A")
    B = te.placeholder((9, 21), "int8", name="B")
    dot = as_dot_product_contraction(ops.matmul(A, B, name="C"))
    kernel = pack_b_kernel(dot, 16, 12, 128, OPTIONS)
    assert kernel.attrs["schedule"].startswith("pack B of C: 2 panels of 3x16x4, panel-major")
    b = np.random.default_rng(0).integers(-128, 128, (9, 21)).astype(np.int8)
    out = run_kernels([kernel], {"B": b})
    np.testing.assert_array_equal(out["C_bcomp"].reshape(-1)[:21],
                                  -128 * b.astype(np.int32).sum(axis=0))
    assert not out["C_bpacked"][0, 1, :, 5:, :].any()     # columns 21..31: zero


def _call_widths(stmt, found=None, key="NR"):
    """The ``key`` parameter of every micro-kernel call in a statement."""
    found = [] if found is None else found
    if isinstance(stmt, MicroKernelCall):
        found.append(dict(stmt.params).get(key))
    for child in (getattr(stmt, "body", None), getattr(stmt, "then_body", None),
                  getattr(stmt, "else_body", None), *getattr(stmt, "stmts", ())):
        if child is not None:
            _call_widths(child, found, key)
    return found


@pytest.mark.parametrize("n, nr, narrow", [(50, 48, 16), (196, 80, 48), (64, 64, None),
                                           (40, 8, None)])
def test_ragged_last_panel_calls_a_narrower_micro_kernel(n, nr, narrow):
    """The last panel's tiles compute only the 16-column vectors holding its columns."""
    rng = np.random.default_rng(n + nr)
    A = te.placeholder((7, 8), "uint8", name="A")
    B = te.placeholder((8, n), "int8", name="B")
    C = ops.matmul(A, B, out_dtype="int32", name="C")
    dot = as_dot_product_contraction(C)
    kernels = lower_dot_product_contraction(dot, "dot_u8s8", Blocking(mi=3, nr=nr, kc=8, mc=6),
                                            OPTIONS)
    a, b = _data(A, rng), _data(B, rng)
    got = run_kernels(kernels, {"A": a, "B": b}, semantics=SEMANTICS)["C"].reshape(7, n)
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    widths = set(_call_widths(kernels[-1].body))
    assert widths == ({nr, narrow} if narrow else {nr})


@pytest.mark.parametrize("k, packed_a", [(8, None), (10, None), (8, "uint8")])
def test_ragged_last_strip_calls_a_micro_kernel_of_fewer_rows(k, packed_a):
    """7 rows in strips of 3: the last strip's tiles compute its one row only, read in place
    (4 | K) or from the packed strip (K = 10, or A shifted)."""
    rng = np.random.default_rng(k)
    dtype = "int8" if packed_a else "uint8"
    A = te.placeholder((7, k), dtype, name="A")
    B = te.placeholder((k, 20), "int8", name="B")
    dot = as_dot_product_contraction(ops.matmul(A, B, out_dtype="int32", name="C"))
    kernels = lower_dot_product_contraction(dot, "dot_u8s8", Blocking(mi=3, nr=8, kc=k, mc=3),
                                            OPTIONS, packed_a=packed_a)
    a, b = _data(A, rng), _data(B, rng)
    got = run_kernels(kernels, {"A": a, "B": b}, semantics=SEMANTICS)["C"].reshape(7, 20)
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    assert set(_call_widths(kernels[-1].body, key="MI")) == {3, 1}
    assert ("C_apacked" in _calls(kernels[-1].body)) == (k % 4 != 0 or packed_a is not None)
