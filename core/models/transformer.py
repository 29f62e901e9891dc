"""Transformer encoder layers: the thesis's TF-Small/Base/Large (§3.6.4, Table 3.5's G1-G3
chains: 8/12/16 heads of 64, sequence 512), BERT-base and a ViT-Base block.

An encoder layer on a (tokens, hidden) input: multi-head self-attention (Q, K, V dense layers,
heads split by reshape + transpose, scores ``q @ k^T / sqrt(d_head)``, softmax, ``@ v``, heads
merged, an output dense layer), then a feed-forward block (dense, activation, dense), each with a
residual. ``norm_first=False`` is the original Transformer / BERT (layer norm after each
residual), ``True`` is ViT (layer norm before each block).

>>> from tilecraft.models.builder import TeBuilder
>>> b = TeBuilder()
>>> y = encoder_layer(b, b.input("x", (5, 8)), heads=2, ffn=16, activation="gelu", name="l0")
>>> y.shape
(5, 8)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilecraft.errors import ShapeError
from tilecraft.models.builder import LayerBuilder, Value


@dataclass(frozen=True)
class EncoderConfig:
    """The shape of an encoder layer: ``tokens`` x ``hidden`` activations, ``heads`` attention
    heads of ``hidden // heads``, a feed-forward width ``ffn``."""

    tokens: int
    hidden: int
    heads: int
    ffn: int
    activation: str = "relu"
    norm_first: bool = False
    eps: float = 1e-5


def attention(b: LayerBuilder, x: Value, heads: int, name: str) -> Value:
    """Multi-head self-attention of x (tokens, hidden) -> (tokens, hidden)."""
    tokens, hidden = b.shape_of(x)
    if hidden % heads:
        raise ShapeError(f"{name}: hidden size {hidden} does not divide into {heads} heads; "
                         "choose heads dividing the hidden size")
    d_head = hidden // heads

    def split(t: Value, which: str, perm: tuple[int, int, int]) -> Value:
        shaped = b.reshape(t, (tokens, heads, d_head), name=f"{name}_{which}_split")
        return b.transpose(shaped, perm, name=f"{name}_{which}_heads")

    q = split(b.dense(x, hidden, name=f"{name}_q"), "q", (1, 0, 2))  # (heads, tokens, d)
    k = split(b.dense(x, hidden, name=f"{name}_k"), "k", (1, 2, 0))  # (heads, d, tokens)
    v = split(b.dense(x, hidden, name=f"{name}_v"), "v", (1, 0, 2))
    scores = b.batch_matmul(q, k, name=f"{name}_scores")
    scaled = b.scale(scores, 1.0 / math.sqrt(d_head), name=f"{name}_scaled")
    probs = b.softmax(scaled, name=f"{name}_probs")
    context = b.batch_matmul(probs, v, name=f"{name}_context")  # (heads, tokens, d)
    merged = b.reshape(b.transpose(context, (1, 0, 2), name=f"{name}_context_t"),
                       (tokens, hidden), name=f"{name}_merged")
    return b.dense(merged, hidden, name=f"{name}_out")


def feed_forward(b: LayerBuilder, x: Value, ffn: int, activation: str, name: str) -> Value:
    """dense(hidden -> ffn), activation, dense(ffn -> hidden)."""
    hidden = b.shape_of(x)[-1]
    up = b.dense(x, ffn, name=f"{name}_up")
    if activation == "relu":
        act = b.relu(up, name=f"{name}_act")
    elif activation == "gelu":
        act = b.gelu(up, name=f"{name}_act")
    else:
        raise ShapeError(f"{name}: activation {activation!r} is not one of 'relu', 'gelu'")
    return b.dense(act, hidden, name=f"{name}_down")


def encoder_layer(b: LayerBuilder, x: Value, heads: int, ffn: int, activation: str = "relu",
                  norm_first: bool = False, eps: float = 1e-5, name: str = "layer") -> Value:
    """One encoder layer on x (tokens, hidden); see the module docstring."""
    if norm_first:
        attended = attention(b, b.layer_norm(x, f"{name}_ln1", eps), heads, f"{name}_attn")
        h = b.add(x, attended, name=f"{name}_res1")
        fed = feed_forward(b, b.layer_norm(h, f"{name}_ln2", eps), ffn, activation,
                           f"{name}_ffn")
        return b.add(h, fed, name=f"{name}_res2")
    h = b.layer_norm(b.add(x, attention(b, x, heads, f"{name}_attn"), name=f"{name}_res1"),
                     f"{name}_ln1", eps)
    out = b.add(h, feed_forward(b, h, ffn, activation, f"{name}_ffn"), name=f"{name}_res2")
    return b.layer_norm(out, f"{name}_ln2", eps)


def build_encoder(b: LayerBuilder, config: EncoderConfig) -> Value:
    """The input ``x`` (tokens, hidden) through one encoder layer of ``config``."""
    x = b.input("x", (config.tokens, config.hidden))
    return encoder_layer(b, x, config.heads, config.ffn, config.activation, config.norm_first,
                         config.eps, name="layer")


# Table 3.5: TF-Small/Base/Large and BERT-S/B/L share the batch GEMM chains G1-G3 (8/12/16
# heads of 64, sequence 512); the original Transformer's feed-forward is 4x hidden with ReLU.
TRANSFORMER_SIZES = {
    "small": EncoderConfig(tokens=512, hidden=512, heads=8, ffn=2048),
    "base": EncoderConfig(tokens=512, hidden=768, heads=12, ffn=3072),
    "large": EncoderConfig(tokens=512, hidden=1024, heads=16, ffn=4096),
}
# BERT-base (Devlin et al.): 768 hidden, 12 heads, 3072 GELU feed-forward, post-norm, eps 1e-12.
BERT_BASE = EncoderConfig(tokens=512, hidden=768, heads=12, ffn=3072, activation="gelu",
                          eps=1e-12)
# ViT-Base/16 at 224^2 (Dosovitskiy et al.): 196 patches + the class token, pre-norm, eps 1e-6.
VIT_BASE = EncoderConfig(tokens=197, hidden=768, heads=12, ffn=3072, activation="gelu",
                         norm_first=True, eps=1e-6)
