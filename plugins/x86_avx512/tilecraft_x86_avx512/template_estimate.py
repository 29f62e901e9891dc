"""The x86 micro-kernel template's predicted time for a compute (the target's
:meth:`~tilecraft.target.base.Target.native_lowering`), which the AMOS mapping stage weighs
against mapping the compute onto an intrinsic itself.

The template's own model, from its default parameters (:mod:`.gemm_template`) and the spec:

- the register tile ``MI x NR`` the template picks (Eq. 3.4): each step of it issues ``MI *
  NR / 16`` FMA (or VNNI / BF16 dot-product) instructions and loads ``MI`` broadcast groups of
  4 bytes and ``NR / 16`` vectors from L1; the tile runs at the spec's peak for the operands'
  dtype (the measured FMA ceiling, :meth:`ComputeUnits.flops_per_core
  <tilecraft.target.spec.ComputeUnits.flops_per_core>`) unless its loads take longer at the
  L1 bandwidth of the spec, and wastes what padding ``M`` and ``N`` up to whole tiles costs;
- its blocks of ``MC`` rows (per batch) spread over the threads (an uneven last round idles
  threads);
- against the traffic through DRAM (the spec's bandwidth): A, B and C once, and B again,
  written and read, where it is packed first.

>>> from tilecraft import ops, te
>>> from tilecraft_x86_avx512.host import CacheLevel, HostInfo
>>> from tilecraft_x86_avx512.spec import build_spec
>>> host = HostInfo("test CPU", 2, 4.0e9, "test", (CacheLevel("L1", 32768, False),
...                 CacheLevel("L2", 1 << 20, False), CacheLevel("L3", 32 << 20, True)),
...                 frozenset({"avx512f"}), fma_flops_per_core=128e9,
...                 l1_bytes_per_second=512e9, dram_bytes_per_second=32e9)
>>> spec = build_spec(host)
>>> C = ops.matmul(te.placeholder((256, 256), name="A"), te.placeholder((256, 256), name="B"))
>>> estimate = template_estimate(C, spec, threads=2)
>>> estimate.strategy
'x86 micro-kernel template outer_product_f32 (register tile MI=6 x NR=64)'
>>> round(estimate.seconds * 1e6, 1)  # 2 * 256^3 flops at 99% of 2 * 128 GFLOP/s
132.1
>>> template_estimate(ops.relu(C), spec, threads=2) is None  # no template for it
True
"""

from __future__ import annotations

import math

from tilecraft.cost.loop_nest import outer_bandwidth, roofline_seconds
from tilecraft.dtypes import DType
from tilecraft.passes.contraction import as_contraction, as_dot_product_contraction
from tilecraft.target.base import LoweringEstimate
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor
from tilecraft_x86_avx512.blocking.depthwise import as_depthwise, depthwise_estimate
from tilecraft_x86_avx512.conv_variants import template_view
from tilecraft_x86_avx512.fusion import BlockingMachine
from tilecraft_x86_avx512.gemm_template import (
    MIN_FLOPS,
    MIN_SIDE,
    default_config,
    grouped_default_config,
    grouped_micro_kernel,
)
from tilecraft_x86_avx512.microkernels import OUTER_PRODUCT_F32

#: bytes of the A value (fp32) or group (4 int8, 2 bfloat16) a micro-kernel step broadcasts
BROADCAST_BYTES = 4


def _used(extent: int, tile: int) -> float:
    """The fraction of whole tiles of ``tile`` that ``extent`` fills."""
    return extent / (math.ceil(extent / tile) * tile)


def template_estimate(tensor: Tensor, spec: TargetSpec, threads: int) -> LoweringEstimate | None:
    """The template's strategy and predicted seconds for ``tensor`` on ``spec`` with
    ``threads`` threads (see the module docstring); ``None`` where the template does not
    lower it (no contraction, or one too small or too thin to pay for packing). A depthwise
    convolution runs on a kernel of its own: its estimate
    (:func:`~.blocking.depthwise.depthwise_estimate`)."""
    depthwise = as_depthwise(tensor)
    if depthwise is not None:
        return depthwise_estimate(depthwise, spec, threads)
    view = template_view(tensor)
    contraction = as_contraction(view, broadcast_batch=True)
    dot = as_dot_product_contraction(view) if contraction is None else None
    if contraction is None and dot is None:
        return None
    chosen = contraction if contraction is not None else dot.contraction
    batch, m, n, k = chosen.extents()
    if chosen.flops < MIN_FLOPS or min(m, n) < MIN_SIDE:
        return None
    machine = BlockingMachine.from_spec(spec, threads)
    if dot is None:
        config = default_config(chosen, machine.l1_bytes, machine.l2_bytes, threads)
        micro_kernel, dtype, packs_b = OUTER_PRODUCT_F32.name, DType.FLOAT32, \
            config["NC"] == 0
    else:
        config = grouped_default_config(dot, machine.l2_bytes, threads)
        micro_kernel, dtype, packs_b = grouped_micro_kernel(dot)[0], dot.a_dtype, \
            config["NC"] == 0
    mi, nr = config["MI"], config["NR"]
    units = spec.compute
    vector_bytes = units.vector_bits // 8
    vectors = nr * 4 // vector_bytes  # NR counts 32-bit lanes
    operations_per_instruction = 2 * units.lanes(dtype)
    step_compute = mi * vectors * operations_per_instruction / (
        units.flops_per_core(dtype) / units.frequency_hz)
    step_loads = (mi * BROADCAST_BYTES + vectors * vector_bytes) / \
        spec.memory.level("L1").bandwidth_bytes_per_cycle
    tile = step_compute / max(step_compute, step_loads)
    padding = _used(m, mi) * _used(n, nr)
    blocks = batch * math.ceil(m / config["MC"])
    cores = min(threads, units.cores)
    balance = blocks / (math.ceil(blocks / cores) * cores)
    efficiency = tile * padding * balance
    rate = cores * units.flops_per_core(dtype) * efficiency
    element = dtype.bytes
    moved = (batch * (m * k + k * n) * element + batch * m * n * tensor.dtype.bytes
             + (2 * batch * k * n * element if packs_b else 0))
    bandwidth, level = outer_bandwidth(spec)
    seconds, bound = roofline_seconds(chosen.flops, rate, moved, bandwidth)
    basis = (f"{chosen.flops} operations at {efficiency:.0%} of the {dtype.value} peak of "
             f"{cores} core(s) ({rate / 1e9:.3g} GOP/s: register tile {tile:.0%}, padding "
             f"{padding:.0%}, blocks over threads {balance:.0%}) vs {moved} bytes at "
             f"{bandwidth / 1e9:.3g} GB/s ({level}): {bound}")
    return LoweringEstimate(f"x86 micro-kernel template {micro_kernel} (register tile "
                            f"MI={mi} x NR={nr})", seconds, basis)


__all__ = ["template_estimate"]
