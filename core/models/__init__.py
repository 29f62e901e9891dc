"""A zoo of whole networks built with :mod:`tilecraft.ops`, seeded random weights as constants
(no downloads): the thesis's Transformer Small/Base/Large encoder layers, a BERT-base layer, a
ViT-Base block, ResNet-18/50 and MobileNet-V2, each full size or small, as a Graph
(:func:`build`) or an ONNX model with the same weights (:func:`to_onnx`).

>>> import tilecraft.models as models
>>> sorted(models.NETWORKS)[:3]
['bert_base', 'mobilenet_v2', 'resnet18']
>>> models.transformer_encoder_layer("small", small=True).outputs[0].shape
(17, 32)
"""

from __future__ import annotations

from tilecraft.graph import Graph
from tilecraft.models.zoo import NETWORKS, Network, UnknownNetworkError, build, get, to_onnx


def transformer_encoder_layer(size: str = "base", small: bool = False, seed: int = 0) -> Graph:
    """Transformer-``size`` (small, base or large) encoder layer, sequence 512."""
    return build(f"transformer_{size}", small, seed)


def bert_base_layer(small: bool = False, seed: int = 0) -> Graph:
    """BERT-base encoder layer, sequence 512."""
    return build("bert_base", small, seed)


def vit_base_block(small: bool = False, seed: int = 0) -> Graph:
    """ViT-Base/16 encoder block, 197 tokens."""
    return build("vit_base", small, seed)


def resnet18(small: bool = False, seed: int = 0) -> Graph:
    """ResNet-18, batch 1, 224x224."""
    return build("resnet18", small, seed)


def resnet50(small: bool = False, seed: int = 0) -> Graph:
    """ResNet-50, batch 1, 224x224."""
    return build("resnet50", small, seed)


def mobilenet_v2(small: bool = False, seed: int = 0) -> Graph:
    """MobileNet-V2, batch 1, 224x224."""
    return build("mobilenet_v2", small, seed)


__all__ = ["NETWORKS", "Network", "UnknownNetworkError", "bert_base_layer", "build", "get",
           "mobilenet_v2", "resnet18", "resnet50", "to_onnx", "transformer_encoder_layer",
           "vit_base_block"]
