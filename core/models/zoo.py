"""The networks by name, each at full size (the papers' shapes, batch 1) and small (the same
operators and structure at test size), built as a tilecraft Graph or as an ONNX model.

>>> import numpy as np
>>> import tilecraft as tc
>>> graph = build("resnet18", small=True)
>>> [t.name for t in graph.inputs], graph.outputs[0].shape
(['x'], (1, 10))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tilecraft.errors import TilecraftError
from tilecraft.graph import Graph
from tilecraft.models.builder import LayerBuilder, TeBuilder, Value
from tilecraft.models.convnets import ConvNetConfig, mobilenet_v2, resnet
from tilecraft.models.transformer import (
    BERT_BASE,
    TRANSFORMER_SIZES,
    VIT_BASE,
    EncoderConfig,
    build_encoder,
)

if TYPE_CHECKING:
    import onnx


class UnknownNetworkError(TilecraftError):
    """A network name the zoo does not have."""


@dataclass(frozen=True)
class Network:
    """A network of the zoo: ``full`` and ``small`` build it on a LayerBuilder."""

    name: str
    description: str
    full: Callable[[LayerBuilder], Value]
    small: Callable[[LayerBuilder], Value]


def _encoder(config: EncoderConfig) -> Callable[[LayerBuilder], Value]:
    return lambda b: build_encoder(b, config)


def _small_encoder(config: EncoderConfig) -> EncoderConfig:
    # 17 tokens (prime), a quarter of the heads at 16 wide, feed-forward 3x: every operator
    # and structure, ragged tiles
    heads = config.heads // 4
    return replace(config, tokens=17, hidden=16 * heads, heads=heads, ffn=48 * heads)


RESNET18 = ConvNetConfig(depths=(2, 2, 2, 2))
RESNET50 = ConvNetConfig(depths=(3, 4, 6, 3), bottleneck=True)
MOBILENET_V2 = ConvNetConfig()
# 32^2 images, channels / 8 (ResNet) or / 4 (MobileNet), 10 classes, one block per stage
SMALL_CONV = {"image": 32, "classes": 10}
SMALL_MOBILENET_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 1, 2), (6, 64, 1, 2),
                          (6, 96, 1, 1), (6, 160, 1, 2), (6, 320, 1, 1))

NETWORKS: dict[str, Network] = {
    **{f"transformer_{size}": Network(
        f"transformer_{size}",
        f"Transformer-{size.capitalize()} encoder layer (thesis §3.6.4, Table 3.5), "
        f"{cfg.tokens} tokens x {cfg.hidden}, {cfg.heads} heads, FFN {cfg.ffn} ReLU",
        _encoder(cfg), _encoder(_small_encoder(cfg))) for size, cfg in TRANSFORMER_SIZES.items()},
    "bert_base": Network(
        "bert_base", "BERT-base encoder layer, 512 tokens x 768, 12 heads, FFN 3072 GELU",
        _encoder(BERT_BASE), _encoder(_small_encoder(BERT_BASE))),
    "vit_base": Network(
        "vit_base", "ViT-Base/16 block (pre-norm), 197 tokens x 768, 12 heads, MLP 3072 GELU",
        _encoder(VIT_BASE), _encoder(_small_encoder(VIT_BASE))),
    "resnet18": Network(
        "resnet18", "ResNet-18, batch 1, 224x224",
        lambda b: resnet(b, RESNET18),
        lambda b: resnet(b, replace(RESNET18, width=0.125, depths=(1, 1, 1, 1),
                                    **SMALL_CONV))),
    "resnet50": Network(
        "resnet50", "ResNet-50, batch 1, 224x224",
        lambda b: resnet(b, RESNET50),
        lambda b: resnet(b, replace(RESNET50, width=0.125, depths=(1, 1, 1, 1),
                                    **SMALL_CONV))),
    "mobilenet_v2": Network(
        "mobilenet_v2", "MobileNet-V2, batch 1, 224x224",
        lambda b: mobilenet_v2(b, MOBILENET_V2),
        lambda b: mobilenet_v2(b, replace(MOBILENET_V2, width=0.25, **SMALL_CONV),
                               SMALL_MOBILENET_STAGES)),
}


def get(name: str) -> Network:
    """The zoo's network ``name``; an UnknownNetworkError listing the names otherwise."""
    if name not in NETWORKS:
        raise UnknownNetworkError(f"no network named {name!r} in tilecraft.models; choose one "
                                  f"of {', '.join(NETWORKS)}")
    return NETWORKS[name]


def build(name: str, small: bool = False, seed: int = 0) -> Graph:
    """Network ``name`` as a tilecraft Graph (input ``x``, weights as constants)."""
    network = get(name)
    out = (network.small if small else network.full)(TeBuilder(seed))
    return Graph.from_outputs([out])


def to_onnx(name: str, small: bool = False, seed: int = 0, opset: int = 17) -> onnx.ModelProto:
    """Network ``name`` as an ONNX model with the same weights as :func:`build` (needs the
    ``onnx`` extra)."""
    from tilecraft.models.onnx_builder import OnnxBuilder

    network = get(name)
    builder = OnnxBuilder(seed)
    out = (network.small if small else network.full)(builder)
    return builder.model(out, graph_name=f"{name}{'_small' if small else ''}", opset=opset)
