"""The operator library: every operator is a plain te compute (or a few), built with
:mod:`tilecraft.te`, returning a Tensor. Conventions follow PyTorch (NCHW, OIHW weights,
keyword arguments with PyTorch's defaults); every op accepts ``name=`` (multi-compute ops name
their intermediate tensors ``<name>_<step>``).

>>> import numpy as np
>>> import tilecraft as tc
>>> from tilecraft import te, ops
>>> x = te.placeholder((2, 3), name="x")
>>> w = te.placeholder((4, 3), name="w")
>>> y = ops.relu(ops.dense(x, w, name="fc"), name="act")
>>> tc.reference.run(y, x=np.ones((2, 3), np.float32), w=np.ones((4, 3), np.float32))
array([[3., 3., 3., 3.],
       [3., 3., 3., 3.]], dtype=float32)
"""

from tilecraft.ops import catalog
from tilecraft.ops.activation import gelu, leaky_relu, relu, sigmoid, tanh
from tilecraft.ops.conv import conv1d, conv2d, conv3d
from tilecraft.ops.conv_transpose import (
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose2d_zero_insert,
    conv_transpose3d,
)
from tilecraft.ops.conv_variants import batched_conv2d, capsule_conv2d, depthwise_conv2d
from tilecraft.ops.einsum import einsum
from tilecraft.ops.elementwise import (
    add,
    bias_add,
    cast,
    div,
    maximum,
    minimum,
    mul,
    scale,
    sub,
)
from tilecraft.ops.layout import concat, depth_to_space, pad, reshape, space_to_depth, transpose
from tilecraft.ops.linalg import batch_matmul, bilinear, dense, gemv, grouped_dense, matmul
from tilecraft.ops.normalization import batch_norm, layer_norm
from tilecraft.ops.pooling import avg_pool2d, global_avg_pool2d, max_pool2d
from tilecraft.ops.reduction import (
    mean,
    reduce_max,
    reduce_min,
    reduce_prod,
    reduce_sum,
    variance,
)
from tilecraft.ops.softmax import log_softmax, softmax

__all__ = [
    "add", "avg_pool2d", "batch_matmul", "batched_conv2d", "conv_transpose2d_zero_insert",
    "grouped_dense", "batch_norm", "bias_add", "bilinear", "capsule_conv2d",
    "cast", "concat", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "dense", "depth_to_space", "depthwise_conv2d", "div", "einsum",
    "gelu", "gemv",
    "global_avg_pool2d", "layer_norm", "leaky_relu", "log_softmax", "matmul", "max_pool2d",
    "maximum", "mean", "minimum", "mul", "pad", "reduce_max", "reduce_min", "reduce_prod",
    "reduce_sum",
    "relu", "reshape", "scale", "sigmoid", "softmax", "space_to_depth", "sub", "tanh",
    "transpose", "variance", "catalog",
]
