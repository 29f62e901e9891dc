"""Bad arguments to operators raise ShapeError / DTypeError naming the op, the argument and
the fix."""

from __future__ import annotations

import pytest

from tilecraft import ops, te
from tilecraft.errors import DTypeError, ShapeError


def ph(*shape: int, dtype: str = "float32", name: str = "x") -> te.Tensor:
    return te.placeholder(shape, dtype, name=name)


SHAPE_ERRORS = [
    ("conv2d channel mismatch",
     lambda: ops.conv2d(ph(1, 3, 8, 8), ph(4, 2, 3, 3, name="w")),
     r"conv2d: w \(w, shape \(4, 2, 3, 3\)\) has 2 input channels but x .* has 3 channels"
     r".*\(out_channels, in_channels/groups, \*kernel\)"),
    ("conv2d groups vs input channels",
     lambda: ops.conv2d(ph(1, 3, 8, 8), ph(4, 1, 3, 3, name="w"), groups=2),
     r"conv2d: groups=2 does not divide the 3 input channels"),
    ("conv2d groups vs output channels",
     lambda: ops.conv2d(ph(1, 4, 8, 8), ph(3, 2, 3, 3, name="w"), groups=2),
     r"conv2d: groups=2 does not divide the 3 output channels"),
    ("conv2d kernel larger than padded input",
     lambda: ops.conv2d(ph(1, 1, 4, 4), ph(1, 1, 5, 5, name="w"), padding=0),
     r"conv2d: the kernel .* is larger than the padded input \(4 = 4 \+ padding \(0, 0\)\)"
     r".*smaller kernel or more padding"),
    ("conv2d dilated kernel",
     lambda: ops.conv2d(ph(1, 1, 6, 6), ph(1, 1, 3, 3, name="w"), dilation=3),
     r"conv2d: the kernel \(extent 3, dilation 3, so 7 wide\)"),
    ("conv2d zero stride",
     lambda: ops.conv2d(ph(1, 1, 6, 6), ph(1, 1, 3, 3, name="w"), stride=0),
     r"conv2d: stride=0 has the value 0; each entry must be at least 1"),
    ("conv2d stride tuple length",
     lambda: ops.conv2d(ph(1, 1, 6, 6), ph(1, 1, 3, 3, name="w"), stride=(1, 1, 1)),
     r"conv2d: stride=\(1, 1, 1\) must be an int or a tuple of 2 ints"),
    ("conv2d negative padding",
     lambda: ops.conv2d(ph(1, 1, 6, 6), ph(1, 1, 3, 3, name="w"), padding=-1),
     r"conv2d: padding=-1 must hold non-negative ints"),
    ("conv2d rank",
     lambda: ops.conv2d(ph(3, 8, 8), ph(1, 3, 3, 3, name="w")),
     r"conv2d: x \(x\) must have 4 dimensions, got shape \(3, 8, 8\)"),
    ("conv2d layout",
     lambda: ops.conv2d(ph(1, 8, 8, 3), ph(3, 3, 3, 1, name="w"), layout="NWHC"),
     r"conv2d: layout='NWHC' is not supported; use 'NCHW' .* or 'NHWC'"),
    ("conv2d NHWC channel mismatch",
     lambda: ops.conv2d(ph(1, 8, 8, 3), ph(3, 3, 2, 4, name="w"), layout="NHWC"),
     r"conv2d: w .* HWIO\) has 2 input channels"),
    ("conv1d not a tensor",
     lambda: ops.conv1d([1, 2, 3], ph(1, 1, 1, name="w")),
     r"conv1d: argument x must be a te Tensor, got list"),
    ("conv_transpose2d weight channels",
     lambda: ops.conv_transpose2d(ph(1, 3, 5, 5), ph(4, 2, 3, 3, name="w")),
     r"conv_transpose2d: w .* has 4 input channels but x .* has 3.*"
     r"\(in_channels, out_channels/groups, \*kernel\)"),
    ("conv_transpose1d output_padding",
     lambda: ops.conv_transpose1d(ph(1, 1, 5), ph(1, 1, 3, name="w"), stride=2,
                                  output_padding=2),
     r"conv_transpose1d: output_padding 2 .* must be smaller than stride \(2\) or dilation"),
    ("conv_transpose1d padding too large",
     lambda: ops.conv_transpose1d(ph(1, 1, 2), ph(1, 1, 1, name="w"), padding=3),
     r"conv_transpose1d: padding 3 is too large"),
    ("depthwise weight",
     lambda: ops.depthwise_conv2d(ph(1, 3, 8, 8), ph(4, 2, 3, 3, name="w")),
     r"depthwise_conv2d: w \(w\) has shape \(4, 2, 3, 3\); .* \(3, multiplier, R, S\) or "
     r"\(3\*multiplier, 1, R, S\)"),
    ("capsule channels",
     lambda: ops.capsule_conv2d(ph(1, 3, 8, 8), ph(2, 4, 3, 3, 4, name="w")),
     r"capsule_conv2d: w .* has 4 input channels but x \(x\) has 3"),
    ("matmul inner dimension",
     lambda: ops.matmul(ph(4, 5, name="A"), ph(6, 3, name="B")),
     r"matmul: inner dimensions differ: op\(A\) \(A\) is 4x5 and op\(B\) \(B\) is 6x3; "
     r"fix the shapes or set transpose_a/transpose_b"),
    ("matmul rank",
     lambda: ops.matmul(ph(2, 4, 5, name="A"), ph(5, 3, name="B")),
     r"matmul: A \(A\) must have 2 dimensions"),
    ("gemv length", lambda: ops.gemv(ph(4, 5, name="A"), ph(4)),
     r"gemv: A \(A\) is 4x5 but x \(x\) has 4 elements; x needs 5"),
    ("batch_matmul batch",
     lambda: ops.batch_matmul(ph(2, 4, 5, name="A"), ph(3, 5, 6, name="B")),
     r"batch_matmul: batch sizes differ: A has 2 and B has 3"),
    ("bilinear weight",
     lambda: ops.bilinear(ph(2, 3, name="a"), ph(2, 4, name="b"), ph(5, 4, 3, name="W")),
     r"bilinear: W \(W\) has shape \(5, 4, 3\); .* must be \(out, 3, 4\)"),
    ("dense features", lambda: ops.dense(ph(2, 3), ph(4, 5, name="W")),
     r"dense: x \(x\) has 3 features but W \(W\) is \(4, 5\)"),
    ("softmax axis", lambda: ops.softmax(ph(2, 3), axis=2),
     r"softmax: axis=2 is out of range for a tensor with 2 dimensions; use a value in \[-2, 1\]"),
    ("mean duplicate axes", lambda: ops.mean(ph(2, 3), axes=(1, -1)),
     r"mean: axes=\(1, -1\) names the same axis twice"),
    ("reshape size", lambda: ops.reshape(ph(2, 3), (4, 2)),
     r"reshape: x has 6 elements \(\(2, 3\)\) but shape \(4, 2\) holds 8"),
    ("reshape infer", lambda: ops.reshape(ph(2, 3), (4, -1)),
     r"reshape: cannot infer -1 in \(4, -1\) .* 6 is not divisible by 4"),
    ("reshape two -1", lambda: ops.reshape(ph(2, 3), (-1, -1)),
     r"more than one -1"),
    ("transpose perm", lambda: ops.transpose(ph(2, 3, 4), (0, 0, 1)),
     r"transpose: perm=\(0, 0, 1\) is not a permutation of 0..2"),
    ("depth_to_space channels", lambda: ops.depth_to_space(ph(1, 6, 2, 2), 2),
     r"depth_to_space: x has 6 channels, not divisible by block\*block = 4"),
    ("space_to_depth size", lambda: ops.space_to_depth(ph(1, 1, 5, 4), 2),
     r"space_to_depth: x is 5x4, not divisible by block=2"),
    ("depth_to_space mode", lambda: ops.depth_to_space(ph(1, 4, 2, 2), 2, mode="RCD"),
     r"mode='RCD' must be 'CRD' .* or 'DCR'"),
    ("concat shapes", lambda: ops.concat([ph(2, 3, name="a"), ph(3, 4, name="b")], axis=0),
     r"concat: tensors\[1\] \(b, shape \(3, 4\)\) does not match tensors\[0\] .* outside axis 0"),
    ("concat empty", lambda: ops.concat([]), r"concat: needs at least one tensor"),
    ("add broadcast", lambda: ops.add(ph(2, 3, name="a"), ph(4, name="b")),
     r"add: shapes \(2, 3\) and \(4,\) cannot be broadcast"),
    ("bias_add size", lambda: ops.bias_add(ph(1, 3, 4, 4), ph(4, name="b")),
     r"bias_add: bias \(b\) has 4 elements but axis 1 of x .* has 3"),
    ("pad entries", lambda: ops.pad(ph(2, 3), [(1, 1)]),
     r"pad: pad_width has 1 entries but x has 2 dimensions"),
    ("pad negative", lambda: ops.pad(ph(2, 3), [(0, 0), (-1, 0)]),
     r"pad: pad_width entry 1 \(\(-1, 0\)\) is negative"),
    ("layer_norm gamma", lambda: ops.layer_norm(ph(2, 3), ph(2, name="g")),
     r"layer_norm: gamma \(g\) has shape \(2,\) but must have shape \(3,\)"),
    ("batch_norm mean", lambda: ops.batch_norm(ph(1, 3, 2, 2), ph(4, name="m"), ph(3, name="v")),
     r"batch_norm: mean \(m\) has shape \(4,\) but must have shape \(3,\)"),
    ("max_pool2d padding", lambda: ops.max_pool2d(ph(1, 1, 8, 8), 2, padding=2),
     r"max_pool2d: padding 2 is more than half the kernel \(2\)"),
    ("avg_pool2d kernel", lambda: ops.avg_pool2d(ph(1, 1, 3, 3), 4),
     r"avg_pool2d: the kernel .* is larger than the padded input"),
]


@pytest.mark.parametrize("build, pattern", [c[1:] for c in SHAPE_ERRORS],
                         ids=[c[0] for c in SHAPE_ERRORS])
def test_shape_errors(build, pattern: str) -> None:
    with pytest.raises(ShapeError, match=pattern):
        build()


DTYPE_ERRORS = [
    ("matmul mixed dtypes",
     lambda: ops.matmul(ph(2, 3, dtype="uint8", name="A"), ph(3, 2, dtype="int8", name="B")),
     r"matmul: A is uint8 but B is int8; pass out_dtype= \(e.g. 'int32' for uint8 x int8\)"),
    ("matmul float out for ints",
     lambda: ops.matmul(ph(2, 3, dtype="int8", name="A"), ph(3, 2, dtype="int8", name="B"),
                        out_dtype="float32"),
     r"matmul: out_dtype=float32 mixes float and integer"),
    ("conv2d mixed", lambda: ops.conv2d(ph(1, 1, 4, 4), ph(1, 1, 1, 1, dtype="float16",
                                                         name="w")),
     r"conv2d: x is float32 but w is float16"),
    ("softmax int", lambda: ops.softmax(ph(2, 3, dtype="int32")),
     r"softmax: x \(x\) has dtype int32, but softmax needs a float tensor; convert it first "
     r"with ops.cast\(x, 'float32'\)"),
    ("gelu int", lambda: ops.gelu(ph(3, dtype="int8")), r"gelu: x \(x\) has dtype int8"),
    ("mean int", lambda: ops.mean(ph(3, dtype="int8")), r"mean: x \(x\) has dtype int8"),
    ("avg_pool int", lambda: ops.avg_pool2d(ph(1, 1, 4, 4, dtype="int8"), 2),
     r"avg_pool2d: x \(x\) has dtype int8"),
    ("add dtypes", lambda: ops.add(ph(2, name="a"), ph(2, dtype="float16", name="b")),
     r"add: a is float32 but b is float16; convert one of them with ops.cast"),
    ("add float scalar to int", lambda: ops.add(ph(2, dtype="int32"), 0.5),
     r"add: the float scalar 0.5 cannot combine with the int32 tensor x"),
    ("add two scalars", lambda: ops.add(1, 2), r"add: at least one operand must be a Tensor"),
    ("div ints", lambda: ops.div(ph(2, dtype="int32"), 2),
     r"div: x has dtype int32; true division needs float tensors"),
    ("concat dtypes",
     lambda: ops.concat([ph(2, name="a"), ph(2, dtype="int8", name="b")]),
     r"concat: tensors\[1\] \(b\) is int8 but tensors\[0\] \(a\) is float32"),
    ("pad fractional int", lambda: ops.pad(ph(3, dtype="int8"), [(1, 1)], value=0.5),
     r"pad: value 0.5 is not an integer but x is int8"),
    ("bias_add dtype", lambda: ops.bias_add(ph(2, 3), ph(3, dtype="float16", name="b")),
     r"bias_add: bias \(b\) is float16 but x \(x\) is float32"),
    ("cast to bool", lambda: ops.cast(ph(3), "bool"), r"cast: tensors cannot be bool"),
    ("cast unknown", lambda: ops.cast(ph(3), "float64"), r"unknown dtype 'float64'"),
    ("layer_norm gamma dtype",
     lambda: ops.layer_norm(ph(2, 3), ph(3, dtype="float16", name="g")),
     r"layer_norm: gamma \(g\) is float16 but x is float32"),
]


@pytest.mark.parametrize("build, pattern", [c[1:] for c in DTYPE_ERRORS],
                         ids=[c[0] for c in DTYPE_ERRORS])
def test_dtype_errors(build, pattern: str) -> None:
    with pytest.raises(DTypeError, match=pattern):
        build()
