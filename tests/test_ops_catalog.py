"""Every operator of tilecraft.ops, on every catalog case and a few more, against an
independent numpy implementation written here (float64, shift-and-accumulate convolutions,
scatter-form transposed convolutions, sliding-window pooling), run through the reference
interpreter."""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilecraft as tc
from tilecraft.ops import catalog
from tilecraft.ops.catalog_cases import case, t
from tilecraft.ops.opcase import OpCase

F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)


# --- helpers ---------------------------------------------------------------------------------
def wide(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int64) if a.dtype.kind in "iu" else a.astype(np.float64)


def result_dtype(*arrays: np.ndarray, out_dtype: str | None = None) -> np.dtype:
    if out_dtype is not None:
        return np.dtype(ml_dtypes.bfloat16) if out_dtype == "bfloat16" else np.dtype(out_dtype)
    first = arrays[0].dtype
    return first if first.kind not in "iu" else np.dtype(np.int32)


def tup(value, n):
    return (value,) * n if isinstance(value, int) else tuple(value)


def pad_pairs(padding, n):
    if isinstance(padding, int):
        return [(padding, padding)] * n
    return [(p, p) if isinstance(p, int) else tuple(p) for p in padding]


# --- linear algebra --------------------------------------------------------------------------
def o_gemv(A, x, out_dtype=None):
    return (wide(A) @ wide(x)).astype(result_dtype(A, out_dtype=out_dtype))


def o_matmul(A, B, transpose_a=False, transpose_b=False, out_dtype=None):
    a = wide(A).T if transpose_a else wide(A)
    b = wide(B).T if transpose_b else wide(B)
    return (a @ b).astype(result_dtype(A, out_dtype=out_dtype))


def o_batch_matmul(A, B, transpose_a=False, transpose_b=False, out_dtype=None):
    a = np.swapaxes(wide(A), 1, 2) if transpose_a else wide(A)
    b = np.swapaxes(wide(B), 1, 2) if transpose_b else wide(B)
    return np.matmul(a, b).astype(result_dtype(A, out_dtype=out_dtype))


def o_bilinear(x1, x2, W, bias=None):
    out = np.einsum("ni,oij,nj->no", wide(x1), wide(W), wide(x2))
    return (out + (0 if bias is None else wide(bias))).astype(x1.dtype)


def o_dense(x, W, bias=None, out_dtype=None):
    out = wide(x) @ wide(W).T + (0 if bias is None else wide(bias))
    return out.astype(result_dtype(x, out_dtype=out_dtype))


# --- convolutions: shift-and-accumulate over kernel taps ----------------------------------------
def conv_nd(x, w, stride=1, padding=0, dilation=1, groups=1, out_dtype=None):
    nd = x.ndim - 2
    stride, dilation = tup(stride, nd), tup(dilation, nd)
    xp = np.pad(wide(x), [(0, 0), (0, 0), *pad_pairs(padding, nd)])
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    kernel = w.shape[2:]
    out_sp = [(xp.shape[2 + d] - dilation[d] * (kernel[d] - 1) - 1) // stride[d] + 1
              for d in range(nd)]
    out = np.zeros((n, k, *out_sp))
    if x.dtype.kind in "iu":
        out = out.astype(np.int64)
    kg = k // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for taps in itertools.product(*(range(e) for e in kernel)):
            window = tuple(slice(taps[d] * dilation[d],
                                 taps[d] * dilation[d] + stride[d] * (out_sp[d] - 1) + 1,
                                 stride[d]) for d in range(nd))
            patch = xs[(slice(None), slice(None), *window)]
            weights = wide(w[(slice(g * kg, (g + 1) * kg), slice(None), *taps)])
            out[:, g * kg:(g + 1) * kg] += np.einsum("nc...,kc->nk...", patch, weights)
    return out.astype(result_dtype(x, out_dtype=out_dtype))


def o_conv2d(x, w, layout="NCHW", **kw):
    if layout == "NHWC":
        out = conv_nd(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), **kw)
        return out.transpose(0, 2, 3, 1)
    return conv_nd(x, w, **kw)


def conv_transpose_nd(x, w, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                      out_dtype=None):
    """Scatter form: every input element adds w * x at i*stride + r*dilation - padding."""
    nd = x.ndim - 2
    stride, dilation = tup(stride, nd), tup(dilation, nd)
    padding, output_padding = tup(padding, nd), tup(output_padding, nd)
    n, cin, *in_sp = x.shape
    _, og, *kernel = w.shape
    out_sp = [(in_sp[d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (kernel[d] - 1)
              + output_padding[d] + 1 for d in range(nd)]
    full = [max((in_sp[d] - 1) * stride[d] + dilation[d] * (kernel[d] - 1) + 1,
                padding[d] + out_sp[d]) for d in range(nd)]
    buffer = np.zeros((n, og * groups, *full))
    cg = cin // groups
    for g in range(groups):
        xs = wide(x[:, g * cg:(g + 1) * cg])
        for taps in itertools.product(*(range(e) for e in kernel)):
            target = tuple(slice(taps[d] * dilation[d],
                                 taps[d] * dilation[d] + stride[d] * (in_sp[d] - 1) + 1,
                                 stride[d]) for d in range(nd))
            weights = wide(w[(slice(g * cg, (g + 1) * cg), slice(None), *taps)])
            buffer[(slice(None), slice(g * og, (g + 1) * og), *target)] += np.einsum(
                "nc...,co->no...", xs, weights)
    crop = tuple(slice(padding[d], padding[d] + out_sp[d]) for d in range(nd))
    return buffer[(slice(None), slice(None), *crop)].astype(result_dtype(x, out_dtype=out_dtype))


def o_depthwise_conv2d(x, w, stride=1, padding=0, dilation=1, out_dtype=None):
    channels = x.shape[1]
    filters = w.reshape(-1, 1, *w.shape[2:])  # (C, m) and (C*m, 1) are the same memory
    return conv_nd(x, filters, stride, padding, dilation, groups=channels, out_dtype=out_dtype)


def o_capsule_conv2d(x, w, stride=1, padding=0, out_dtype=None):
    sh, sw = tup(stride, 2)
    xp = np.pad(wide(x), [(0, 0), (0, 0), *pad_pairs(padding, 2)])
    kh, kw = w.shape[2:4]
    oh = (xp.shape[2] - kh) // sh + 1
    ow = (xp.shape[3] - kw) // sw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow, w.shape[4]))
    for rh, rw in itertools.product(range(kh), range(kw)):
        patch = xp[:, :, rh:rh + sh * (oh - 1) + 1:sh, rw:rw + sw * (ow - 1) + 1:sw]
        out += np.einsum("bchw,kcs->bkhws", patch, wide(w[:, :, rh, rw, :]))
    return out.astype(result_dtype(x, out_dtype=out_dtype))


# --- memory-bound operators --------------------------------------------------------------------
_erf = np.vectorize(math.erf)


def unary(fn):
    return lambda x, **kw: fn(wide(x), **kw).astype(x.dtype)


def binary(fn):
    def oracle(a, b):
        dtype = a.dtype
        return fn(wide(a), wide(b) if isinstance(b, np.ndarray) else b).astype(dtype)
    return oracle


def o_pad(x, pad_width, value=0.0):
    return np.pad(x, pad_width, constant_values=value).astype(x.dtype)


def softmax64(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def o_layer_norm(x, gamma=None, beta=None, axes=-1, eps=1e-5):
    axes = tuple(np.atleast_1d(axes) % x.ndim)
    v = wide(x)
    out = (v - v.mean(axis=axes, keepdims=True)) / np.sqrt(v.var(axis=axes, keepdims=True) + eps)
    param_shape = [x.shape[d] if d in axes else 1 for d in range(x.ndim)]
    if gamma is not None:
        out = out * wide(gamma).reshape(param_shape)
    if beta is not None:
        out = out + wide(beta).reshape(param_shape)
    return out.astype(x.dtype)


def o_batch_norm(x, mean, var, gamma=None, beta=None, eps=1e-5, axis=1):
    shape = [1] * x.ndim
    shape[axis] = -1

    def along(p):
        return wide(p).reshape(shape)

    out = (wide(x) - along(mean)) / np.sqrt(along(var) + eps)
    out = out * (1 if gamma is None else along(gamma)) + (0 if beta is None else along(beta))
    return out.astype(x.dtype)


def pool(x, kernel, stride, padding, fill, reducer):
    kernel = tup(kernel, 2)
    stride = kernel if stride is None else tup(stride, 2)
    padding = tup(padding, 2)
    xp = np.pad(wide(x), [(0, 0), (0, 0), *[(p, p) for p in padding]], constant_values=fill)
    windows = np.lib.stride_tricks.sliding_window_view(xp, kernel, axis=(2, 3))
    windows = windows[:, :, ::stride[0], ::stride[1]]
    return reducer(windows, axis=(-2, -1)).astype(x.dtype)


def o_max_pool2d(x, kernel, stride=None, padding=0):
    fill = -np.inf if x.dtype.kind == "f" or x.dtype == BF16 else np.iinfo(x.dtype).min
    return pool(x, kernel, stride, padding, fill, np.max)


def o_avg_pool2d(x, kernel, stride=None, padding=0):
    return pool(x, kernel, stride, padding, 0.0, np.mean)


def o_reshape(x, shape):
    return np.reshape(x, shape)


def o_depth_to_space(x, block, mode="CRD"):
    n, c, h, w = x.shape
    r = block
    if mode == "CRD":
        return x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(
            n, c // (r * r), h * r, w * r)
    return x.reshape(n, r, r, c // (r * r), h, w).transpose(0, 3, 4, 1, 5, 2).reshape(
        n, c // (r * r), h * r, w * r)


def o_space_to_depth(x, block, mode="CRD"):
    n, c, h, w = x.shape
    r = block
    blocks = x.reshape(n, c, h // r, r, w // r, r)
    order = (0, 1, 3, 5, 2, 4) if mode == "CRD" else (0, 3, 5, 1, 2, 4)
    return blocks.transpose(order).reshape(n, c * r * r, h // r, w // r)


def reduction(fn, integer_dtype=None):
    def oracle(x, axes=None, keepdims=False):
        axis = None if axes is None else tuple(np.atleast_1d(axes) % x.ndim)
        out = fn(wide(x), axis=axis, keepdims=keepdims)
        dtype = x.dtype if x.dtype.kind not in "iu" else (integer_dtype or x.dtype)
        return np.asarray(out).astype(dtype)
    return oracle


def o_cast(x, dtype):
    target = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    if target.kind in "iu" and x.dtype.kind == "f":
        info = np.iinfo(target)
        return np.clip(np.trunc(wide(x)), info.min, info.max).astype(target)
    with np.errstate(over="ignore"):
        return x.astype(target)


def o_bias_add(x, bias, axis=1):
    shape = [1] * x.ndim
    shape[axis] = -1
    return (wide(x) + wide(bias).reshape(shape)).astype(x.dtype)


ORACLES = {
    "gemv": o_gemv, "matmul": o_matmul, "batch_matmul": o_batch_matmul,
    "bilinear": o_bilinear, "dense": o_dense,
    "conv1d": conv_nd, "conv2d": o_conv2d, "conv3d": conv_nd,
    "conv_transpose1d": conv_transpose_nd, "conv_transpose2d": conv_transpose_nd,
    "conv_transpose3d": conv_transpose_nd,
    "depthwise_conv2d": o_depthwise_conv2d, "capsule_conv2d": o_capsule_conv2d,
    "add": binary(np.add), "sub": binary(np.subtract), "mul": binary(np.multiply),
    "div": binary(np.divide), "maximum": binary(np.maximum), "minimum": binary(np.minimum),
    "bias_add": o_bias_add,
    "scale": lambda x, factor: (wide(x) * factor).astype(x.dtype),
    "cast": o_cast,
    "relu": unary(lambda v: np.maximum(v, 0)),
    "leaky_relu": unary(lambda v, negative_slope=0.01: np.where(v >= 0, v, negative_slope * v)),
    "gelu": unary(lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2)))),
    "sigmoid": unary(lambda v: 1 / (1 + np.exp(-v))),
    "tanh": unary(np.tanh),
    "softmax": unary(lambda v, axis=-1: softmax64(v, axis)),
    "log_softmax": unary(lambda v, axis=-1: np.log(softmax64(v, axis))),
    "layer_norm": o_layer_norm, "batch_norm": o_batch_norm,
    "max_pool2d": o_max_pool2d, "avg_pool2d": o_avg_pool2d,
    "global_avg_pool2d": lambda x: wide(x).mean(axis=(2, 3), keepdims=True).astype(x.dtype),
    "pad": o_pad,
    "transpose": lambda x, perm=None: np.transpose(x, perm),
    "reshape": o_reshape, "depth_to_space": o_depth_to_space,
    "space_to_depth": o_space_to_depth,
    "concat": lambda tensors, axis=0: np.concatenate(tensors, axis=axis),
    "mean": reduction(np.mean), "variance": reduction(np.var),
    "reduce_sum": reduction(np.sum, np.int32), "reduce_max": reduction(np.max),
    "reduce_min": reduction(np.min),
}


def check_case(op_case: OpCase, rng: np.random.Generator | None = None) -> None:
    graph, arrays = op_case.build(rng)
    got = tc.reference.run(graph, **arrays)
    inputs = [arrays[spec.name] for spec in op_case.inputs]
    args = [inputs] if op_case.pack_inputs else inputs
    expected = ORACLES[op_case.name](*args, **op_case.params)
    assert got.shape == expected.shape, op_case.id
    assert got.dtype == expected.dtype, op_case.id
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                               rtol=op_case.rtol, atol=op_case.atol, err_msg=op_case.id)


# --- the catalog -----------------------------------------------------------------------------
@pytest.mark.parametrize("op_case", catalog.cases(), ids=lambda c: c.id)
def test_catalog_case_matches_numpy(op_case: OpCase) -> None:
    check_case(op_case)


REQUIRED = {
    "gemv", "matmul", "batch_matmul", "bilinear", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "depthwise_conv2d",
    "capsule_conv2d", "pad", "relu", "gelu", "sigmoid", "tanh", "softmax", "layer_norm",
    "batch_norm", "max_pool2d", "avg_pool2d", "global_avg_pool2d", "transpose", "reshape",
    "depth_to_space", "space_to_depth", "concat", "mean", "variance", "add", "sub", "mul", "div",
    "maximum", "minimum", "bias_add", "scale", "cast",
}


def _is_prime(n: int) -> bool:
    return n > 2 and all(n % p for p in range(2, math.isqrt(n) + 1))


@pytest.mark.parametrize("op", sorted(REQUIRED | set(ORACLES)))
def test_catalog_covers_operator_with_awkward_shapes(op: str) -> None:
    cases = catalog.cases(ops=op)
    assert len(cases) >= 3, op
    extents = [[e for spec in c.inputs for e in spec.shape] for c in cases]
    assert any(1 in ext for ext in extents), f"{op}: no case with a size-1 extent"
    assert any(any(_is_prime(e) for e in ext) for ext in extents), f"{op}: no prime extent"
    assert any(any(e % 16 for e in ext) for ext in extents), f"{op}: all extents divide by 16"


def test_catalog_api() -> None:
    assert set(catalog.operators()) == set(ORACLES)
    standard = catalog.standard_set()
    assert [c.name for c in standard] == catalog.operators()
    intensive = catalog.cases("compute-intensive")
    bound = catalog.cases(tags=["memory-bound"])
    assert intensive and bound and len(intensive) + len(bound) == len(catalog.cases())
    assert all(c.name in {"conv2d"} for c in catalog.cases(["conv", "float16"], ops="conv2d"))
    assert catalog.get("conv2d[stride2-pad1-c3]").params == {"stride": 2, "padding": 1}
    with pytest.raises(tc.errors.GraphError, match="no case"):
        catalog.get("conv2d[nope]")
    with pytest.raises(tc.errors.GraphError, match="unknown operator"):
        catalog.cases(ops="convolution")


def test_catalog_is_deterministic() -> None:
    op_case = catalog.get("matmul[m13-k17-n19]")
    g1, a1 = op_case.build()
    g2, a2 = op_case.builder(None)
    assert str(g1) == str(g2)
    np.testing.assert_array_equal(a1["A"], a2["A"])
    _, a3 = op_case.build(np.random.default_rng(1))
    assert not np.array_equal(a1["A"], a3["A"])


# --- more shapes than the catalog --------------------------------------------------------------
EXTRA = [
    case("matmul", "k1-m70-n3", t("A", 70, 1), t("B", 1, 3)),
    case("conv2d", "stride3-dil3-groups4-c8", t("x", 1, 8, 17, 16), t("w", 4, 2, 3, 2),
         stride=3, dilation=(3, 1), groups=4, padding=((2, 0), (1, 3))),
    case("conv2d", "nhwc-dil2-asym", t("x", 1, 10, 9, 3), t("w", 2, 3, 3, 5),
         dilation=2, padding=((0, 1), (2, 2)), layout="NHWC"),
    case("conv1d", "depthwise-groups5", t("x", 3, 5, 16), t("w", 10, 1, 4), groups=5,
         stride=3, padding=2),
    case("conv3d", "stride-tuple", t("x", 2, 2, 5, 6, 7), t("w", 4, 2, 2, 3, 1),
         stride=(1, 2, 3), padding=((1, 0), (0, 2), (1, 1))),
    case("conv_transpose2d", "op-below-dilation", t("x", 1, 2, 4, 5), t("w", 2, 3, 2, 3),
         stride=1, dilation=3, output_padding=2, padding=1),
    case("conv_transpose1d", "stride-greater-than-kernel", t("x", 2, 3, 6), t("w", 3, 2, 2),
         stride=4, padding=1, output_padding=3),
    case("conv_transpose3d", "groups3", t("x", 1, 6, 2, 3, 4), t("w", 6, 1, 2, 2, 2), stride=2,
         groups=3, dilation=(1, 2, 1)),
    case("depthwise_conv2d", "m3-stride-tuple", t("x", 1, 2, 11, 9), t("w", 2, 3, 2, 3),
         stride=(2, 3), padding=(1, 0)),
    case("max_pool2d", "all-negative-padded", t("x", 1, 1, 5, 5, low=-9, high=-1), kernel=3,
         stride=2, padding=1),
    case("layer_norm", "axis-first-only-gamma", t("x", 6, 4), t("gamma", 6), axes=0),
    case("softmax", "bf16-3x40", t("x", 3, 40, dtype=tc.DType.BFLOAT16, low=-3, high=3)),
    case("batch_norm", "channels-last", t("x", 2, 5, 3), t("mean", 3),
         t("var", 3, low=0.5, high=1.5), t("gamma", 3), t("beta", 3), axis=-1),
    case("reshape", "to-1d", t("x", 3, 4, 5), shape=(-1,)),
    case("concat", "axis-middle-i8", t("a", 2, 3, 4, dtype=tc.DType.INT8),
         t("b", 2, 1, 4, dtype=tc.DType.INT8), pack=True, axis=1),
]


@pytest.mark.parametrize("op_case", EXTRA, ids=lambda c: c.id)
def test_extra_case_matches_numpy(op_case: OpCase) -> None:
    check_case(op_case)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_conv2d_and_transpose_parameters(data: st.DataObject) -> None:
    groups = data.draw(st.sampled_from([1, 2, 3]))
    cin = groups * data.draw(st.integers(1, 2))
    cout = groups * data.draw(st.integers(1, 2))
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    stride = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    dilation = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    h, w = data.draw(st.integers(4, 9)), data.draw(st.integers(4, 9))
    pad = [(data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in range(2)]
    if all(dilation[d] * ((kh, kw)[d] - 1) + 1 <= (h, w)[d] + sum(pad[d]) for d in range(2)):
        check_case(case("conv2d", "random", t("x", 1, cin, h, w), t("w", cout, cin // groups,
                                                                      kh, kw),
                        stride=stride, dilation=dilation, padding=pad, groups=groups))
    symmetric = (pad[0][0], pad[1][0])
    output_padding = tuple(data.draw(st.integers(0, max(stride[d], dilation[d]) - 1))
                           for d in range(2))
    sizes = [(hw - 1) * s - 2 * p + dl * (k - 1) + op + 1 for hw, s, p, dl, k, op in
             zip((h, w), stride, symmetric, dilation, (kh, kw), output_padding)]
    if min(sizes) >= 1:
        check_case(case("conv_transpose2d", "random", t("x", 1, cin, h, w),
                        t("w", cin, cout // groups, kh, kw), stride=stride,
                        padding=symmetric, output_padding=output_padding, dilation=dilation,
                        groups=groups))
