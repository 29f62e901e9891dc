"""Convolutional networks: ResNet-18/50 (He et al.) and MobileNet-V2 (Sandler et al.), batch 1,
NCHW, inference batch norms, every channel count scaled by ``width`` (1.0 = the paper's) so tests
can run the same structure small.

>>> from tilecraft.models.builder import TeBuilder
>>> resnet(TeBuilder(), ConvNetConfig(image=16, width=0.125, depths=(1, 1, 1, 1),
...        classes=10)).shape
(1, 10)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tilecraft.models.builder import LayerBuilder, Value


@dataclass(frozen=True)
class ConvNetConfig:
    """``image`` x ``image`` RGB input, channels scaled by ``width``, blocks per stage
    ``depths``, ``bottleneck`` blocks (ResNet-50) or basic ones (ResNet-18)."""

    image: int = 224
    width: float = 1.0
    depths: Sequence[int] = (2, 2, 2, 2)
    bottleneck: bool = False
    classes: int = 1000


def channels(base: int, width: float) -> int:
    """``base`` scaled by ``width``, at least 4."""
    return max(4, int(round(base * width)))


def conv_bn(b: LayerBuilder, x: Value, out_channels: int, kernel: int, stride: int, name: str,
            act: str | None = "relu", groups: int = 1) -> Value:
    """conv (no bias, 'same' padding) -> batch norm -> activation (relu, relu6 or None)."""
    y = b.batch_norm(b.conv2d(x, out_channels, kernel, name=f"{name}_conv", stride=stride,
                              padding=kernel // 2, groups=groups), name=f"{name}_bn")
    if act == "relu":
        return b.relu(y, name=f"{name}_relu")
    if act == "relu6":
        return b.relu6(y, name=f"{name}_relu6")
    return y


def _residual_block(b: LayerBuilder, x: Value, planes: int, stride: int, bottleneck: bool,
                    name: str) -> Value:
    in_channels = b.shape_of(x)[1]
    if bottleneck:
        out_channels = planes * 4
        y = conv_bn(b, x, planes, 1, 1, f"{name}_a")
        y = conv_bn(b, y, planes, 3, stride, f"{name}_b")
        y = conv_bn(b, y, out_channels, 1, 1, f"{name}_c", act=None)
    else:
        out_channels = planes
        y = conv_bn(b, x, planes, 3, stride, f"{name}_a")
        y = conv_bn(b, y, planes, 3, 1, f"{name}_b", act=None)
    shortcut = x
    if stride != 1 or in_channels != out_channels:
        shortcut = conv_bn(b, x, out_channels, 1, stride, f"{name}_down", act=None)
    return b.relu(b.add(y, shortcut, name=f"{name}_sum"), name=f"{name}_out")


def resnet(b: LayerBuilder, config: ConvNetConfig) -> Value:
    """ResNet: 7x7/2 stem, 3x3/2 max pool, four stages (64, 128, 256, 512 planes), global
    average pool, fully connected classifier; input ``x`` (1, 3, image, image)."""
    x = b.input("x", (1, 3, config.image, config.image))
    y = conv_bn(b, x, channels(64, config.width), 7, 2, "stem")
    y = b.max_pool2d(y, 3, 2, 1, name="stem_pool")
    for stage, (planes, depth) in enumerate(zip((64, 128, 256, 512), config.depths)):
        for block in range(depth):
            stride = 2 if stage > 0 and block == 0 else 1
            y = _residual_block(b, y, channels(planes, config.width), stride,
                                config.bottleneck, f"s{stage + 1}b{block + 1}")
    return b.dense(b.global_avg_pool_flat(y, name="pool"), config.classes, name="fc")


# (expansion t, output channels c, blocks n, first stride s), Sandler et al. Table 2
MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _inverted_residual(b: LayerBuilder, x: Value, expansion: int, out_channels: int,
                       stride: int, name: str) -> Value:
    in_channels = b.shape_of(x)[1]
    hidden = in_channels * expansion
    y = x if expansion == 1 else conv_bn(b, x, hidden, 1, 1, f"{name}_expand", act="relu6")
    y = conv_bn(b, y, hidden, 3, stride, f"{name}_dw", act="relu6", groups=hidden)
    y = conv_bn(b, y, out_channels, 1, 1, f"{name}_project", act=None)
    if stride == 1 and in_channels == out_channels:
        return b.add(x, y, name=f"{name}_sum")
    return y


def mobilenet_v2(b: LayerBuilder, config: ConvNetConfig,
                 stages: Sequence[tuple[int, int, int, int]] = MOBILENET_V2_STAGES) -> Value:
    """MobileNet-V2: 3x3/2 stem of 32, inverted residual stages (1x1 expand, 3x3 depthwise,
    1x1 linear projection, ReLU6), a 1x1 conv to 1280, global average pool, classifier."""
    x = b.input("x", (1, 3, config.image, config.image))
    y = conv_bn(b, x, channels(32, config.width), 3, 2, "stem", act="relu6")
    for index, (expansion, base, depth, first_stride) in enumerate(stages):
        for block in range(depth):
            y = _inverted_residual(b, y, expansion, channels(base, config.width),
                                   first_stride if block == 0 else 1,
                                   f"s{index + 1}b{block + 1}")
    y = conv_bn(b, y, channels(1280, config.width), 1, 1, "head", act="relu6")
    return b.dense(b.global_avg_pool_flat(y, name="pool"), config.classes, name="fc")
