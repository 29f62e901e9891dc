"""The nvidia_tc target: an NVIDIA GPU with Tensor Cores (A100-like, sm_80).

Today the plugin is its data: the spec (memory levels global / L2 / shared / fragment, 108 SMs)
and the intrinsic declarations — 12 WMMA ``mma_sync`` variants (m16n16k16, m32n8k16, m8n32k16
× fp16→fp32, fp16→fp16, bf16→fp32, int8→int32) with their ``load_matrix_sync`` /
``store_matrix_sync`` / ``fill_fragment`` companions, and 4 ``mma.sync`` m16n8k16 variants.
The CUDA C code generator, the nvcc/NVRTC build and the launch come in a later issue;
:meth:`NvidiaTcTarget.available` says so, and kernels run on the core's Kernel IR emulator,
intrinsic calls by their declared semantics.

>>> target = NvidiaTcTarget()
>>> target.available().capability.value
'emulate'
>>> target.spec.memory.names
('global', 'L2', 'shared', 'fragment')
>>> target.spec.intrinsic("wmma_m32n8k16_f16_f32").compute.destination.shape
(32, 8)
"""

from __future__ import annotations

import functools
from functools import cached_property
from importlib.resources import files

from tilecraft.target.base import Availability
from tilecraft.target.declared import DeclaredTarget
from tilecraft.target.spec import TargetSpec

TARGET_NAME = "nvidia_tc"
INTRINSIC_FILES = ("wmma.yaml", "mma.yaml")

NOT_YET = "not implemented yet: the CUDA C code generator comes in a later issue"
AVAILABILITY = Availability(
    codegen=False, build=False, execute=False, emulate=True, estimate=False,
    reasons={
        "codegen": NOT_YET,
        "build": "nothing to build until code generation exists (nvcc / NVRTC for sm_80, "
                 "sm_90 planned)",
        "execute": "no launch path yet (cuda-python, where a GPU exists)",
        "estimate": "no performance model (the target measures)",
    })

@functools.cache
def load_target_spec() -> TargetSpec:
    """The spec of ``spec.yaml`` with the intrinsics of ``intrinsics/*.yaml`` (validated; a
    :class:`~tilecraft.errors.PluginError` names the file, intrinsic and field otherwise)."""
    package = files("tilecraft_nvidia_tc")
    return TargetSpec.from_yaml(
        package / "spec.yaml", plugin=TARGET_NAME,
        intrinsic_files=[package / "intrinsics" / name for name in INTRINSIC_FILES])

class NvidiaTcTarget(DeclaredTarget):
    """NVIDIA Tensor Core GPUs: declarations today, CUDA C later (see the module)."""

    availability = AVAILABILITY

    @cached_property
    def spec(self) -> TargetSpec:
        return load_target_spec()

    @property
    def name(self) -> str:
        return TARGET_NAME
