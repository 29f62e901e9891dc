"""Grouped, depthwise and transposed convolutions on the x86 templates (thesis Table 4.2).

Each is rewritten into computes the fast paths already handle:

- a depthwise convolution (one input channel per output channel: ``groups == channels``, any
  window, stride and dilation) runs on its own kernel (:mod:`.blocking.depthwise`): parallel
  over channels, a vector loop along each output row with the window unrolled — not the
  template, whose group split leaves a contraction of one row per group, nor the core's
  loop nest (scalar at stride 2); its pad compute, where the target fuses it
  (:func:`~.blocking.depthwise.fuse_depthwise_pads`), is read inline;
- a grouped convolution (output channel ``k = g * Kg + kk``) has that axis split in two
  (the core's :func:`~tilecraft.passes.group_split.split_grouped_axis`): a batched contraction
  with the group as batch, run by the micro-kernel template;
- a transposed convolution becomes the contraction ``cols = W^T x X`` on the template and a
  col2im gather (the core's :mod:`tilecraft.passes.transposed_conv`), instead of the gather
  form that multiplies ``stride^nd`` times too often; the gather runs phase by phase
  (:mod:`tilecraft_x86_avx512.blocking.col2im`) with contiguous loads;
- the col2im gather of a strided convolution's scatter-form gradient (``tilecraft.autodiff``:
  :mod:`tilecraft.passes.col2im_gather`) runs on that same phase-by-phase kernel, instead of
  a loop nest evaluating its div/mod conditions per element.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.col2im_gather import as_col2im_gather
from tilecraft.passes.group_split import split_grouped_axis
from tilecraft.passes.transposed_conv import as_transposed_conv, transposed_as_gemm
from tilecraft.te.tensor import Tensor
from tilecraft_x86_avx512.blocking.col2im import lower_col2im
from tilecraft_x86_avx512.blocking.depthwise import as_depthwise, lower_depthwise
from tilecraft_x86_avx512.gemm_template import lower_with_template


def template_view(tensor: Tensor) -> Tensor:
    """The compute whose micro-kernel template parameters stand for ``tensor``'s: the
    contraction of a transposed convolution, the group-split form of a grouped one, else
    ``tensor`` itself."""
    conv = as_transposed_conv(tensor)
    if conv is not None:
        return transposed_as_gemm(conv)[0]
    return split_grouped_axis(tensor) or tensor


def lower_conv_variant(tensor: Tensor, options: LoweringOptions, l1_bytes: int, l2_bytes: int,
                       threads: int, config: Mapping[str, Any] | None = None
                       ) -> list[Kernel] | None:
    """The kernels of ``tensor`` on the x86 templates (see the module docstring), or ``None``
    when none applies and no ``config`` forces the micro-kernel template (a ``config`` runs a
    depthwise convolution on the template too)."""
    gather = as_col2im_gather(tensor) if not config else None
    if gather is not None:  # the col2im half of a scatter-form conv gradient
        return [lower_col2im(gather.conv, gather.cols.name, options)]
    depthwise = as_depthwise(tensor) if not config else None
    if depthwise is not None:  # its input read as a tensor: a pad fused with it is not
        return [lower_depthwise(depthwise, options, threads=threads)]
    conv = as_transposed_conv(tensor)
    if conv is not None:
        cols, _ = transposed_as_gemm(conv)
        kernels = lower_with_template(cols, options, l1_bytes, l2_bytes, threads, config)
        if kernels is None:
            return None
        return [*kernels, lower_col2im(conv, cols.name, options)]
    return lower_with_template(split_grouped_axis(tensor) or tensor, options, l1_bytes,
                               l2_bytes, threads, config)


__all__ = ["lower_conv_variant", "template_view"]
