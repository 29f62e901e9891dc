"""The predicted time of the core's lowering of a compute: what a target that has no lowering of
its own for it gets (:func:`tilecraft.lower.lower_compute`: the CPU strategy's default loop nest
(:mod:`tilecraft.schedule.strategies.cpu`) on a CPU-like spec, the lowering strategy its spec
selects otherwise, :mod:`tilecraft.schedule.strategies`), so that the AMOS mapping stage can
weigh a mapping against it (:mod:`tilecraft.intrin.decision`).

A roofline on the target spec, in the family of AMOS's model (arithmetic at the spec's rate
against data moved at the spec's bandwidth, the larger wins): one multiply-add per iteration
of the nest, at the spec's peak for the compute's dtype (:meth:`ComputeUnits.flops_per_core
<tilecraft.target.spec.ComputeUnits.flops_per_core>`) — for the default loop nest, its vector
peak when the nest has a vector loop and its scalar peak (one lane) otherwise, on as many
cores as the nest's parallel loop has iterations (one without a parallel loop); for a GPU's,
an NPU's or an FPGA's strategy, which spreads the compute over the whole chip, the peak of
every core — against every input read and the output written once through the outermost
memory level. It leaves out latencies and assumes perfect reuse, so it errs on the fast side:
a mapping predicted faster than it is faster than the lowering.

>>> from tilecraft import ops, te
>>> from tilecraft.intrin.perfmodel import gpu_spec_example
>>> from tilecraft.lower import LoweringOptions
>>> spec = gpu_spec_example()
>>> A = te.placeholder((64, 64), "float16", name="A")
>>> B = te.placeholder((64, 64), "float16", name="B")
>>> C = ops.matmul(A, B, out_dtype="float32", name="C")
>>> estimate = estimate_loop_nest(C, spec, LoweringOptions.from_spec(spec))
>>> estimate.strategy, round(estimate.seconds * 1e6, 2)
("the core's default loop nest", 262.14)
>>> print(estimate.basis)  # the toy GPU offers no parallel or vector loops: one scalar core
262144 multiply-adds at the scalar float32 peak of 1 core(s) (2 GOP/s) vs 32768 bytes at \
256 GB/s (global): compute-bound
"""

from __future__ import annotations

import math

from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.base import LoweringEstimate
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor

#: what the mapping stage calls the core's default loop nest
DEFAULT_LOOP_NEST = "the core's default loop nest"


def _tensor_bytes(tensor: Tensor) -> int:
    return math.prod(tensor.shape) * tensor.dtype.bytes


def roofline_seconds(operations: float, operations_per_second: float, moved_bytes: float,
                     bytes_per_second: float) -> tuple[float, str]:
    """The larger of the arithmetic time and the traffic time, and which one it is.

    >>> roofline_seconds(2e9, 1e9, 1e6, 1e9)
    (2.0, 'compute-bound')
    """
    compute = operations / operations_per_second
    traffic = moved_bytes / bytes_per_second
    return (compute, "compute-bound") if compute >= traffic else (traffic, "memory-bound")


def outer_bandwidth(spec: TargetSpec) -> tuple[float, str]:
    """Bytes per second through the outermost memory level (its bandwidth per cycle at the
    spec's clock), and that level's name."""
    level = spec.memory.levels[0]
    return level.bandwidth_bytes_per_cycle * spec.compute.frequency_hz, level.name


def estimate_loop_nest(tensor: Tensor, spec: TargetSpec,
                       options: LoweringOptions) -> LoweringEstimate:
    """The default loop nest's predicted time for ``tensor`` on ``spec`` (see the module
    docstring); ``options`` are the lowering options the nest would be lowered with."""
    from tilecraft.schedule.strategies import schedule_with_strategy, strategy_for

    strategy = strategy_for(options).name
    if strategy == "cpu":
        stage = schedule_with_strategy(tensor, options)[tensor]
        kinds = {loop: stage.annotation(loop).kind for loop in stage.leaf_loops}
        vector = LoopKind.VECTOR in kinds.values()
        parallel = [loop for loop, kind in kinds.items() if kind is LoopKind.PARALLEL]
        cores = min(options.cores, spec.compute.cores, parallel[0].extent) if parallel else 1
    else:
        vector, cores = True, spec.compute.cores
    dtype = tensor.dtype
    rate = spec.compute.flops_per_core(dtype)
    if not vector:
        rate /= spec.compute.lanes(dtype)
    rate *= cores
    points = math.prod(tensor.shape) * math.prod(axis.extent for axis in tensor.reduce_axes)
    moved = sum(_tensor_bytes(source) for source in tensor.inputs) + _tensor_bytes(tensor)
    bandwidth, level = outer_bandwidth(spec)
    seconds, bound = roofline_seconds(2.0 * points, rate, moved, bandwidth)
    basis = (f"{points} multiply-adds at the {'vector' if vector else 'scalar'} "
             f"{dtype.value} peak of {cores} core(s) ({rate / 1e9:.3g} GOP/s) vs {moved} bytes "
             f"at {bandwidth / 1e9:.3g} GB/s ({level}): {bound}")
    name = DEFAULT_LOOP_NEST if strategy == "cpu" else f"the core's {strategy} lowering strategy"
    return LoweringEstimate(name, seconds, basis)


__all__ = ["DEFAULT_LOOP_NEST", "estimate_loop_nest", "outer_bandwidth", "roofline_seconds"]
