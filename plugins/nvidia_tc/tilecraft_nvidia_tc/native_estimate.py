"""What nvidia_tc does with a compute when no AMOS mapping is chosen, and its predicted time,
for the mapping stage (:meth:`NvidiaTcTarget.native_lowering
<tilecraft_nvidia_tc.target.NvidiaTcTarget.native_lowering>`, weighed by
:mod:`tilecraft.intrin.decision` against the best mapping onto the Tensor Cores).

A float contraction goes through the core's shared-memory tiled GEMM template
(:mod:`tilecraft.schedule.strategies.gpu_contraction`): its multiply-adds run on the CUDA
cores, accumulating in float32 whatever the operands (fp16, bf16 or fp32), over every SM. Its
prediction is a roofline in the family of AMOS's model, which predicts the mapping: every
multiply-add at the spec's float32 rate of all SMs against every operand read and the result
written once through global memory. It leaves out latencies and assumes perfect reuse, so it
errs on the template's side: a Tensor Core mapping predicted faster than it is faster than the
template. Anything else (int8 contractions, elementwise computes) is left to the core's
estimate of its GPU strategy (``None``).

>>> from tilecraft import ops, te
>>> from tilecraft.lower import LoweringOptions
>>> from tilecraft_nvidia_tc.target import load_target_spec
>>> spec = load_target_spec()
>>> A = te.placeholder((1024, 1024), "float16", name="A")
>>> B = te.placeholder((1024, 1024), "float16", name="B")
>>> C = ops.matmul(A, B, out_dtype="float32", name="C")
>>> estimate = template_estimate(C, LoweringOptions.from_spec(spec))
>>> round(estimate.seconds * 1e6)  # 2 x 1024^3 operations at 19.5 TFLOP/s (A100, fp32)
110
>>> template_estimate(ops.relu(A), LoweringOptions.from_spec(spec)) is None
True
"""

from __future__ import annotations

import math

from tilecraft.cost.loop_nest import outer_bandwidth, roofline_seconds
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.base import LoweringEstimate
from tilecraft.te.tensor import Tensor

__all__ = ["TEMPLATE_STRATEGY", "template_estimate"]

#: how the mapping stage names the template
TEMPLATE_STRATEGY = "nvidia_tc's tiled CUDA-core GEMM template"
#: the template's accumulators (gpu_contraction: float32 whatever the operands)
ACCUMULATION = "float32"


def template_estimate(tensor: Tensor, options: LoweringOptions) -> LoweringEstimate | None:
    """The template's predicted time for ``tensor`` (module docstring); ``None`` where the
    template does not apply or ``options`` carry no spec."""
    from tilecraft.schedule.strategies.gpu_contraction import tiled_contraction

    spec = options.spec
    if spec is None or tiled_contraction(tensor) is None:
        return None
    multiply_adds = math.prod(tensor.shape) * math.prod(axis.extent
                                                         for axis in tensor.reduce_axes)
    rate = spec.compute.peak_flops(ACCUMULATION)
    moved = sum(math.prod(source.shape) * source.dtype.bytes for source in tensor.inputs) \
        + math.prod(tensor.shape) * tensor.dtype.bytes
    bandwidth, level = outer_bandwidth(spec)
    seconds, bound = roofline_seconds(2.0 * multiply_adds, rate, moved, bandwidth)
    basis = (f"{multiply_adds} multiply-adds at the {ACCUMULATION} CUDA-core rate of "
             f"{spec.compute.cores} SMs ({rate / 1e12:.3g} TFLOP/s) vs {moved} bytes at "
             f"{bandwidth / 1e9:.3g} GB/s ({level}): {bound}")
    return LoweringEstimate(TEMPLATE_STRATEGY, seconds, basis)
