"""The case definitions of the operator catalog (see :mod:`tilecraft.ops.catalog`).

Every operator has at least three configurations, among them one with a size-1 extent, one
with a prime extent and one with extents that are not multiples of 16. Sizes stay small (GEMM
1-70, convolutions 1-8 channels and 5-17 pixels) so that the reference interpreter runs each
in a few milliseconds and compiled versions build quickly. The first case of each operator is
its entry in the standard set.
"""

from __future__ import annotations

import math
from typing import Any

from tilecraft.dtypes import DType, as_dtype
from tilecraft.ops.opcase import InputSpec, OpCase

COMPUTE_INTENSIVE_FAMILIES = frozenset({"linalg", "conv", "conv_transpose"})

FAMILY = {
    "gemv": "linalg", "matmul": "linalg", "batch_matmul": "linalg", "bilinear": "linalg",
    "dense": "linalg",
    "conv1d": "conv", "conv2d": "conv", "conv3d": "conv", "depthwise_conv2d": "conv",
    "capsule_conv2d": "conv",
    "conv_transpose1d": "conv_transpose", "conv_transpose2d": "conv_transpose",
    "conv_transpose3d": "conv_transpose",
    "add": "elementwise", "sub": "elementwise", "mul": "elementwise", "div": "elementwise",
    "maximum": "elementwise", "minimum": "elementwise", "bias_add": "elementwise",
    "scale": "elementwise", "cast": "elementwise",
    "relu": "activation", "leaky_relu": "activation", "gelu": "activation",
    "sigmoid": "activation", "tanh": "activation",
    "softmax": "softmax", "log_softmax": "softmax",
    "layer_norm": "normalization", "batch_norm": "normalization",
    "max_pool2d": "pooling", "avg_pool2d": "pooling", "global_avg_pool2d": "pooling",
    "pad": "layout", "transpose": "layout", "reshape": "layout", "depth_to_space": "layout",
    "space_to_depth": "layout", "concat": "layout",
    "mean": "reduction", "variance": "reduction", "reduce_sum": "reduction",
    "reduce_max": "reduction", "reduce_min": "reduction",
}

F16, BF16, I8, U8, I32 = DType.FLOAT16, DType.BFLOAT16, DType.INT8, DType.UINT8, DType.INT32


def t(name: str, *shape: int, dtype: DType = DType.FLOAT32, low: float = -1.0,
      high: float = 1.0) -> InputSpec:
    """An input spec; integer inputs default to the range [-8, 8] ([0, 15] for uint8)."""
    if dtype.is_int and (low, high) == (-1.0, 1.0):
        low, high = (0, 15) if dtype is U8 else (-8, 8)
    return InputSpec(name, tuple(shape), dtype, low, high)


def _tolerance(family: str, dtypes: set[DType]) -> tuple[float, float]:
    floats = {d for d in dtypes if d.is_float}
    if not floats:
        return 0.0, 0.0
    if BF16 in floats:
        return 2e-2, 2e-2
    if F16 in floats:
        return 4e-3, 2e-3
    if family in COMPUTE_INTENSIVE_FAMILIES:
        return 1e-4, 1e-4
    if family in ("softmax", "normalization", "reduction", "pooling"):
        return 1e-5, 1e-5
    return 1e-5, 1e-6


def case(op: str, variant: str, *inputs: InputSpec, pack: bool = False,
         **params: Any) -> OpCase:
    family = FAMILY[op]
    dtypes = {spec.dtype for spec in inputs}
    for key in ("dtype", "out_dtype"):
        if params.get(key) is not None:
            dtypes.add(as_dtype(params[key]))
    intensity = "compute-intensive" if family in COMPUTE_INTENSIVE_FAMILIES else "memory-bound"
    tags = {intensity, family} | {d.value for d in dtypes if d is not DType.FLOAT32}
    rtol, atol = _tolerance(family, dtypes)
    return OpCase(op, variant, tuple(inputs), params, frozenset(tags), rtol, atol, pack)


def _linalg() -> list[OpCase]:
    return [
        case("gemv", "m13-k17", t("A", 13, 17), t("x", 17)),
        case("gemv", "m1-k7", t("A", 1, 7), t("x", 7)),
        case("gemv", "m33-k64", t("A", 33, 64), t("x", 64)),
        case("gemv", "u8s8-m5-k29", t("A", 5, 29, dtype=U8), t("x", 29, dtype=I8),
             out_dtype="int32"),
        case("matmul", "m13-k17-n19", t("A", 13, 17), t("B", 17, 19)),
        case("matmul", "m1-k5-n7", t("A", 1, 5), t("B", 5, 7)),
        case("matmul", "m33-k70-n20", t("A", 33, 70), t("B", 70, 20)),
        case("matmul", "m16-k32-n16", t("A", 16, 32), t("B", 32, 16)),
        case("matmul", "ta-m7-k9-n5", t("A", 9, 7), t("B", 9, 5), transpose_a=True),
        case("matmul", "tb-m6-k11-n3", t("A", 6, 11), t("B", 3, 11), transpose_b=True),
        case("matmul", "tatb-m5-k1-n4", t("A", 1, 5), t("B", 4, 1), transpose_a=True,
             transpose_b=True),
        case("matmul", "f16-m17-k23-n9", t("A", 17, 23, dtype=F16), t("B", 23, 9, dtype=F16)),
        case("matmul", "bf16-m9-k31-n12", t("A", 9, 31, dtype=BF16),
             t("B", 31, 12, dtype=BF16)),
        case("matmul", "i8-m7-k13-n5", t("A", 7, 13, dtype=I8), t("B", 13, 5, dtype=I8)),
        case("matmul", "u8s8-m5-k64-n17", t("A", 5, 64, dtype=U8), t("B", 64, 17, dtype=I8),
             out_dtype="int32"),
        case("batch_matmul", "b3-m13-k11-n17", t("A", 3, 13, 11), t("B", 3, 11, 17)),
        case("batch_matmul", "b1-m5-k3-n7", t("A", 1, 5, 3), t("B", 1, 3, 7)),
        case("batch_matmul", "b2-tatb-m6-k20-n9", t("A", 2, 20, 6), t("B", 2, 9, 20),
             transpose_a=True, transpose_b=True),
        case("batch_matmul", "bcast-b4-m7-k5-n3", t("A", 4, 7, 5), t("B", 1, 5, 3)),
        case("batch_matmul", "f16-b2-m9-k33-n4", t("A", 2, 9, 33, dtype=F16),
             t("B", 2, 33, 4, dtype=F16)),
        case("bilinear", "n7-i11-j13-o5", t("x1", 7, 11), t("x2", 7, 13), t("W", 5, 11, 13)),
        case("bilinear", "n1-i3-j5-o2", t("x1", 1, 3), t("x2", 1, 5), t("W", 2, 3, 5)),
        case("bilinear", "n4-i17-j3-o1", t("x1", 4, 17), t("x2", 4, 3), t("W", 1, 17, 3)),
        case("bilinear", "bias-n3-i6-j4-o7", t("x1", 3, 6), t("x2", 3, 4), t("W", 7, 6, 4),
             t("bias", 7)),
        case("dense", "n13-in17-out19-bias", t("x", 13, 17), t("W", 19, 17), t("bias", 19)),
        case("dense", "n1-in7-out5", t("x", 1, 7), t("W", 5, 7)),
        case("dense", "n33-in20-out10-bias", t("x", 33, 20), t("W", 10, 20), t("bias", 10)),
    ]


def _convolutions() -> list[OpCase]:
    return [
        case("conv1d", "stride2-pad1-c3", t("x", 1, 3, 13), t("w", 4, 3, 3), stride=2,
             padding=1),
        case("conv1d", "c1-k1-w5", t("x", 1, 1, 5), t("w", 1, 1, 1)),
        case("conv1d", "dil2-pad2-c4-w17", t("x", 2, 4, 17), t("w", 5, 4, 3), dilation=2,
             padding=2),
        case("conv1d", "groups2-c4-k6-w11", t("x", 1, 4, 11), t("w", 6, 2, 5), groups=2),
        case("conv2d", "stride2-pad1-c3", t("x", 1, 3, 7, 7), t("w", 4, 3, 3, 3), stride=2,
             padding=1),
        case("conv2d", "c1-k1-5x5-r1", t("x", 1, 1, 5, 5), t("w", 1, 1, 1, 1)),
        case("conv2d", "dil2-pad2-c4-11x13", t("x", 2, 4, 11, 13), t("w", 5, 4, 3, 3),
             dilation=2, padding=2),
        case("conv2d", "groups2-c4-k6-9x9", t("x", 1, 4, 9, 9), t("w", 6, 2, 3, 3), groups=2,
             padding=1),
        case("conv2d", "asym-pad-rect-k3x2", t("x", 1, 2, 8, 6), t("w", 3, 2, 3, 2),
             padding=((1, 2), (0, 1)), stride=(1, 2)),
        case("conv2d", "c8-k8-17x17", t("x", 1, 8, 17, 17), t("w", 8, 8, 3, 3), padding=1),
        case("conv2d", "nhwc-pad1-c3", t("x", 1, 7, 7, 3), t("w", 3, 3, 3, 4), padding=1,
             layout="NHWC"),
        case("conv2d", "nhwc-groups2-stride2", t("x", 2, 9, 11, 4), t("w", 3, 3, 2, 6),
             groups=2, stride=2, layout="NHWC"),
        case("conv2d", "f16-pad1-c3", t("x", 1, 3, 9, 9, dtype=F16),
             t("w", 5, 3, 3, 3, dtype=F16), padding=1),
        case("conv2d", "i8-pad1-c4", t("x", 1, 4, 7, 7, dtype=I8),
             t("w", 3, 4, 3, 3, dtype=I8), padding=1),
        case("conv3d", "stride2-pad1-c2", t("x", 1, 2, 7, 7, 7), t("w", 3, 2, 3, 3, 3),
             stride=2, padding=1),
        case("conv3d", "c1-k1-5x5x5", t("x", 1, 1, 5, 5, 5), t("w", 1, 1, 1, 1, 1)),
        case("conv3d", "dil2-groups3-c3-k6", t("x", 1, 3, 9, 7, 11), t("w", 6, 1, 3, 2, 3),
             dilation=(1, 2, 2), groups=3, padding=(1, 1, 0)),
        case("depthwise_conv2d", "c3-m1-stride2-pad1", t("x", 1, 3, 9, 9), t("w", 3, 1, 3, 3),
             stride=2, padding=1),
        case("depthwise_conv2d", "c1-m1-5x5", t("x", 1, 1, 5, 5), t("w", 1, 1, 3, 3)),
        case("depthwise_conv2d", "c4-m2-dil2-pad2", t("x", 2, 4, 13, 11), t("w", 4, 2, 3, 3),
             dilation=2, padding=2),
        case("depthwise_conv2d", "torch-layout-c3-m2", t("x", 1, 3, 7, 7), t("w", 6, 1, 3, 3),
             padding=1),
        case("capsule_conv2d", "c3-k2-s4-stride2-pad1", t("x", 1, 3, 9, 9),
             t("w", 2, 3, 3, 3, 4), stride=2, padding=1),
        case("capsule_conv2d", "b1-c1-k1-s1", t("x", 1, 1, 5, 5), t("w", 1, 1, 3, 3, 1)),
        case("capsule_conv2d", "c2-k3-s3-11x13", t("x", 2, 2, 11, 13), t("w", 3, 2, 3, 3, 3)),
    ]


def _transposed() -> list[OpCase]:
    return [
        case("conv_transpose1d", "s2-p1-op1-c3", t("x", 1, 3, 7), t("w", 3, 4, 3), stride=2,
             padding=1, output_padding=1),
        case("conv_transpose1d", "s1-p0-c1", t("x", 1, 1, 5), t("w", 1, 1, 3)),
        case("conv_transpose1d", "s3-p2-dil2-groups2", t("x", 2, 4, 11), t("w", 4, 3, 3),
             stride=3, padding=2, dilation=2, groups=2),
        case("conv_transpose2d", "s2-p1-op1-c3", t("x", 1, 3, 5, 5), t("w", 3, 4, 3, 3),
             stride=2, padding=1, output_padding=1),
        case("conv_transpose2d", "s1-p0-c1-5x5", t("x", 1, 1, 5, 5), t("w", 1, 1, 3, 3)),
        case("conv_transpose2d", "s2-dil2-groups2-7x6", t("x", 1, 4, 7, 6), t("w", 4, 3, 3, 3),
             stride=2, dilation=2, groups=2),
        case("conv_transpose2d", "s3-p1-rect-k4x2", t("x", 2, 2, 5, 7), t("w", 2, 5, 4, 2),
             stride=(3, 2), padding=(1, 0), output_padding=(2, 1)),
        case("conv_transpose3d", "s2-p1-op1-c2", t("x", 1, 2, 4, 5, 3), t("w", 2, 3, 3, 3, 3),
             stride=2, padding=1, output_padding=1),
        case("conv_transpose3d", "s1-p0-c1", t("x", 1, 1, 5, 5, 5), t("w", 1, 1, 2, 2, 2)),
        case("conv_transpose3d", "s2-groups2-c4", t("x", 1, 4, 3, 5, 7), t("w", 4, 1, 2, 3, 3),
             stride=(2, 2, 1), groups=2, padding=(0, 1, 1)),
    ]


def _elementwise() -> list[OpCase]:
    cases = []
    for op in ("add", "sub", "mul", "maximum", "minimum"):
        cases += [
            case(op, "13x17", t("a", 13, 17), t("b", 13, 17)),
            case(op, "bcast-1x7-5x1", t("a", 1, 7), t("b", 5, 1)),
            case(op, "scalar-2x3x5", t("a", 2, 3, 5), b=0.375),
            case(op, "bcast-3d-f16", t("a", 3, 1, 11, dtype=F16), t("b", 4, 11, dtype=F16)),
        ]
    cases += [
        case("div", "13x17", t("a", 13, 17), t("b", 13, 17, low=0.5, high=2.0)),
        case("div", "bcast-1x7-5x1", t("a", 1, 7), t("b", 5, 1, low=0.5, high=2.0)),
        case("div", "scalar-2x3x5", t("a", 2, 3, 5), b=3.0),
        case("add", "i8-wrap-7x9", t("a", 7, 9, dtype=I8, low=-128, high=127),
             t("b", 7, 9, dtype=I8, low=-128, high=127)),
        case("mul", "bf16-5x19", t("a", 5, 19, dtype=BF16), t("b", 5, 19, dtype=BF16)),
        case("bias_add", "nchw-2x3x5x7", t("x", 2, 3, 5, 7), t("bias", 3)),
        case("bias_add", "c1-1x1x5x5", t("x", 1, 1, 5, 5), t("bias", 1)),
        case("bias_add", "last-axis-13x17", t("x", 13, 17), t("bias", 17), axis=-1),
        case("scale", "13x17", t("x", 13, 17), factor=0.5),
        case("scale", "1x5", t("x", 1, 5), factor=-3),
        case("scale", "f16-3x7x11", t("x", 3, 7, 11, dtype=F16), factor=0.1),
        case("cast", "f32-to-f16-13x17", t("x", 13, 17, low=-70000, high=70000), dtype="float16"),
        case("cast", "f32-to-i8-sat-1x31", t("x", 1, 31, low=-300, high=300), dtype="int8"),
        case("cast", "i8-to-f32-5x7", t("x", 5, 7, dtype=I8), dtype="float32"),
        case("cast", "f32-to-bf16-3x19", t("x", 3, 19), dtype="bfloat16"),
        case("cast", "i32-to-u8-wrap-11", t("x", 11, dtype=I32, low=-300, high=300),
             dtype="uint8"),
    ]
    return cases


def _activations() -> list[OpCase]:
    cases = []
    for op in ("relu", "gelu", "sigmoid", "tanh", "leaky_relu"):
        cases += [
            case(op, "13x17", t("x", 13, 17, low=-4, high=4)),
            case(op, "n1", t("x", 1)),
            case(op, "2x3x5x7-f16", t("x", 2, 3, 5, 7, dtype=F16, low=-4, high=4)),
        ]
    cases += [
        case("relu", "i8-7x9", t("x", 7, 9, dtype=I8)),
        case("gelu", "bf16-5x33", t("x", 5, 33, dtype=BF16, low=-4, high=4)),
        case("sigmoid", "wide-range-40", t("x", 40, low=-100, high=100)),
        case("leaky_relu", "slope0.2-3x11", t("x", 3, 11), negative_slope=0.2),
    ]
    return cases


def _normalisation() -> list[OpCase]:
    return [
        case("softmax", "7x13", t("x", 7, 13, low=-5, high=5)),
        case("softmax", "1x1", t("x", 1, 1)),
        case("softmax", "axis1-3x17x5", t("x", 3, 17, 5, low=-5, high=5), axis=1),
        case("softmax", "f16-4x19", t("x", 4, 19, dtype=F16, low=-5, high=5)),
        case("log_softmax", "7x13", t("x", 7, 13, low=-5, high=5)),
        case("log_softmax", "1x1", t("x", 1, 1)),
        case("log_softmax", "axis0-17x3", t("x", 17, 3, low=-5, high=5), axis=0),
        case("layer_norm", "5x13-affine", t("x", 5, 13), t("gamma", 13), t("beta", 13)),
        case("layer_norm", "1x7-plain", t("x", 1, 7)),
        case("layer_norm", "axes12-2x3x17", t("x", 2, 3, 17), t("gamma", 3, 17),
             t("beta", 3, 17), axes=(1, 2)),
        case("layer_norm", "f16-3x33", t("x", 3, 33, dtype=F16), t("gamma", 33, dtype=F16),
             t("beta", 33, dtype=F16)),
        case("batch_norm", "2x3x7x7", t("x", 2, 3, 7, 7), t("mean", 3),
             t("var", 3, low=0.5, high=1.5), t("gamma", 3), t("beta", 3)),
        case("batch_norm", "1x1x5x5", t("x", 1, 1, 5, 5), t("mean", 1),
             t("var", 1, low=0.5, high=1.5), t("gamma", 1), t("beta", 1)),
        case("batch_norm", "ncl-1x5x11", t("x", 1, 5, 11), t("mean", 5),
             t("var", 5, low=0.5, high=1.5), t("gamma", 5), t("beta", 5)),
        case("batch_norm", "f16-1x4x3x5", t("x", 1, 4, 3, 5, dtype=F16), t("mean", 4, dtype=F16),
             t("var", 4, dtype=F16, low=0.5, high=1.5), t("gamma", 4, dtype=F16),
             t("beta", 4, dtype=F16)),
    ]


def _pooling() -> list[OpCase]:
    cases = []
    for op in ("max_pool2d", "avg_pool2d"):
        cases += [
            case(op, "k3-s2-p1-c3-9x9", t("x", 1, 3, 9, 9), kernel=3, stride=2, padding=1),
            case(op, "k2-c1-5x5", t("x", 1, 1, 5, 5), kernel=2),
            case(op, "k3x2-s1-p1x0-13x7", t("x", 2, 2, 13, 7), kernel=(3, 2), stride=1,
                 padding=(1, 0)),
            case(op, "f16-k2-s1-4x17x6", t("x", 1, 4, 17, 6, dtype=F16), kernel=2, stride=1),
        ]
    cases += [
        case("max_pool2d", "i8-k3-s2-p1-7x7", t("x", 1, 2, 7, 7, dtype=I8), kernel=3, stride=2,
             padding=1),
        case("global_avg_pool2d", "2x3x7x7", t("x", 2, 3, 7, 7)),
        case("global_avg_pool2d", "1x1x1x1", t("x", 1, 1, 1, 1)),
        case("global_avg_pool2d", "1x5x17x13", t("x", 1, 5, 17, 13)),
    ]
    return cases


def _layout() -> list[OpCase]:
    return [
        case("pad", "2d-1x2", t("x", 5, 7), pad_width=((1, 2), (2, 1))),
        case("pad", "4d-nchw-1-c1", t("x", 1, 1, 5, 5), pad_width=((0, 0), (0, 0), (1, 1), (1, 1))),
        case("pad", "3d-asym-value-13", t("x", 2, 13, 3), pad_width=((0, 1), (3, 0), (2, 2)),
             value=-1.5),
        case("pad", "i8-1d-17", t("x", 17, dtype=I8), pad_width=((4, 3),), value=7),
        case("transpose", "2d-13x17", t("x", 13, 17)),
        case("transpose", "3d-201-1x5x3", t("x", 1, 5, 3), perm=(2, 0, 1)),
        case("transpose", "nchw-to-nhwc-2x3x5x7", t("x", 2, 3, 5, 7), perm=(0, 2, 3, 1)),
        case("transpose", "i8-3d-021-4x7x9", t("x", 4, 7, 9, dtype=I8), perm=(0, 2, 1)),
        case("reshape", "6x5-to-3x10", t("x", 6, 5), shape=(3, 10)),
        case("reshape", "1x17-to-17x1", t("x", 1, 17), shape=(17, 1)),
        case("reshape", "2x3x5-to-infer", t("x", 2, 3, 5), shape=(5, -1)),
        case("reshape", "4d-to-2d-2x3x7x11", t("x", 2, 3, 7, 11), shape=(6, 77)),
        case("depth_to_space", "b2-c4-3x5", t("x", 1, 4, 3, 5), block=2),
        case("depth_to_space", "b1-c3-5x5", t("x", 1, 3, 5, 5), block=1),
        case("depth_to_space", "b3-c18-7x2", t("x", 2, 18, 7, 2), block=3),
        case("depth_to_space", "dcr-b2-c8-3x3", t("x", 1, 8, 3, 3), block=2, mode="DCR"),
        case("space_to_depth", "b2-c1-6x10", t("x", 1, 1, 6, 10), block=2),
        case("space_to_depth", "b3-c2-9x15", t("x", 2, 2, 9, 15), block=3),
        case("space_to_depth", "b1-c3-7x7", t("x", 1, 3, 7, 7), block=1),
        case("space_to_depth", "dcr-b2-c3-4x6", t("x", 1, 3, 4, 6), block=2, mode="DCR"),
        case("concat", "2-axis0-13x5", t("a", 13, 5), t("b", 7, 5), pack=True, axis=0),
        case("concat", "3-axis1-2x1x3", t("a", 2, 1, 3), t("b", 2, 5, 3), t("c", 2, 17, 3),
             pack=True, axis=1),
        case("concat", "1-piece-axis-last", t("a", 3, 11), pack=True, axis=-1),
        case("concat", "4-axis-last-1", t("a", 2, 1), t("b", 2, 1), t("c", 2, 3), t("d", 2, 1),
             pack=True, axis=-1),
    ]


def _reductions() -> list[OpCase]:
    cases = []
    for op in ("mean", "variance"):
        cases += [
            case(op, "axis1-7x13", t("x", 7, 13), axes=1),
            case(op, "all-1x1", t("x", 1, 1)),
            case(op, "axes02-keep-5x3x17", t("x", 5, 3, 17), axes=(0, 2), keepdims=True),
            case(op, "f16-axis-last-3x33", t("x", 3, 33, dtype=F16), axes=-1),
        ]
    for op in ("reduce_sum", "reduce_max", "reduce_min"):
        cases += [
            case(op, "axis1-7x13", t("x", 7, 13), axes=1),
            case(op, "all-1x1", t("x", 1, 1)),
            case(op, "axes02-keep-5x3x17", t("x", 5, 3, 17), axes=(0, 2), keepdims=True),
            case(op, "i8-axis0-31x3", t("x", 31, 3, dtype=I8, low=-128, high=127), axes=0),
        ]
    return cases


def all_cases() -> list[OpCase]:
    """Every case, grouped by operator family."""
    cases = (_linalg() + _convolutions() + _transposed() + _elementwise() + _activations()
             + _normalisation() + _pooling() + _layout() + _reductions())
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids), "catalog case ids must be unique"
    assert all(math.prod(spec.shape) > 0 for c in cases for spec in c.inputs)
    return cases
