"""The nvidia_tc performance model: a kernel's predicted time on the spec's GPU and what
bounds it (compute on the CUDA cores or the Tensor Cores, shared memory, L2, DRAM, latency).

Three steps, one file each:

- :mod:`.profile` counts what the Kernel IR asks for (instructions, Tensor Core issues,
  shared wavefronts, L2 sectors, compulsory DRAM bytes, dependent round trips, resources),
  with :mod:`.access` costing each warp-wide access from its lanes' addresses
  (:mod:`.evaluate`);
- :mod:`.machine` reads the chip's rates and limits from the spec (A100 by default, H100 for
  ``nvidia_tc:h100``);
- :mod:`.hierarchy` composes them as a roofline per memory level inside AMOS's hierarchical
  model (Eq. 5.6-5.8), with the occupancy of the build's registers and shared memory (or the
  profile's estimate where nothing was built).

>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft_nvidia_tc.target import NvidiaTcTarget
>>> target = NvidiaTcTarget()
>>> A, B = te.placeholder((7, 5), name="A"), te.placeholder((7, 5), name="B")
>>> kernel = target.lower_compute(ops.matmul(A, te.placeholder((5, 3), name="W")),
...     LoweringOptions.from_spec(target.spec))[0]
>>> estimate_kernel(kernel, target.spec).bound
'latency'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.target.spec import TargetSpec
from tilecraft_nvidia_tc.model.hierarchy import BOUNDS, GpuEstimate, WaveCost, predict
from tilecraft_nvidia_tc.model.machine import GpuMachine
from tilecraft_nvidia_tc.model.profile import KernelProfile, profile_kernel

__all__ = ["BOUNDS", "GpuEstimate", "GpuMachine", "KernelProfile", "WaveCost",
           "estimate_kernel", "estimate_profile", "profile_for"]


def profile_for(kernel: Kernel, spec: TargetSpec) -> KernelProfile:
    """The counts of ``kernel`` with the spec's grid axes, intrinsics and warp size."""
    threads = spec.threads
    grid = {axis.name for axis in threads.axes if axis.scope == "grid"} if threads else set()
    return profile_kernel(kernel, grid_axes=grid or {"blockIdx.x", "blockIdx.y", "blockIdx.z"},
                          intrinsics={i.name: i for i in spec.intrinsics},
                          subgroup=(threads.subgroup_size if threads else None) or 32)


def estimate_profile(profile: KernelProfile, spec: TargetSpec,
                     build: Mapping[str, Any] | None = None,
                     architecture: str | None = None) -> GpuEstimate:
    """The prediction for ``profile`` on the spec's GPU (``architecture``: the residency
    limits of another one the spec lists); ``build`` is a build report
    (``Artifact.meta["build"]``) whose registers and shared memory for that architecture
    replace the profile's estimate."""
    machine = GpuMachine.from_spec(spec, architecture)
    registers = shared = None
    built = (build or {}).get("architectures", {}).get(machine.architecture)
    if built:
        resources = built["resources"]
        registers = int(resources["registers"])
        shared = int(resources["static_shared_bytes"]) + int(
            (build or {}).get("dynamic_shared_bytes", 0) or 0)
    return predict(profile, machine, registers=registers, shared_bytes=shared)


def estimate_kernel(kernel: Kernel, spec: TargetSpec,
                    build: Mapping[str, Any] | None = None) -> GpuEstimate:
    """The prediction for ``kernel`` on the spec's GPU (see :func:`estimate_profile`)."""
    return estimate_profile(profile_for(kernel, spec), spec, build)
