"""The ascend_npu target: a Huawei Ascend 910-like NPU (32 Da Vinci AI cores).

Today the plugin is its data: the spec (GM, L1 1 MB, L0A / L0B 64 KB, L0C 256 KB, UB 256 KB)
and the intrinsic declarations — the Cube ``mad`` of Eq. 3.5 on 16x16 fractals (fp16 → fp32,
int8 → int32) with its GM → L1 → L0A/L0B and L0C → UB → GM copy path, and one repeat of each
vector-unit operation. The AscendC-style code generator (compiled with g++ against an
emulation header) and the performance model come in a later issue;
:meth:`AscendNpuTarget.available` says so, and kernels run on the core's Kernel IR emulator,
intrinsic calls by their declared semantics.

>>> target = AscendNpuTarget()
>>> target.available().capability.value
'emulate'
>>> target.spec.memory.names
('GM', 'L1', 'L0A', 'L0B', 'L0C', 'UB')
>>> print(target.spec.intrinsic("mad_f16_f32").compute.semantics)
Dst[i1, i2] += cast(float32, Src1[i1, r1]) * cast(float32, Src2[i2, r1])
"""

from __future__ import annotations

import functools
from functools import cached_property
from importlib.resources import files

from tilecraft.errors import TargetError
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.target.base import Availability, Estimate
from tilecraft.target.declared import DeclaredTarget
from tilecraft.target.spec import TargetSpec

TARGET_NAME = "ascend_npu"
INTRINSIC_FILES = ("cube.yaml", "vector.yaml")

NOT_YET = "not implemented yet: the AscendC-style code generator comes in a later issue"
AVAILABILITY = Availability(
    codegen=False, build=False, execute=False, emulate=True, estimate=False,
    reasons={
        "codegen": NOT_YET,
        "build": "nothing to build until code generation exists (then g++ against the "
                 "plugin's emulation header; no CANN toolchain is installable here)",
        "execute": "no Ascend device (and no CANN runtime) on this machine",
        "estimate": "not implemented yet: the performance model comes with the code generator",
    })

@functools.cache
def load_target_spec() -> TargetSpec:
    """The spec of ``spec.yaml`` with the intrinsics of ``intrinsics/*.yaml`` (validated; a
    :class:`~tilecraft.errors.PluginError` names the file, intrinsic and field otherwise)."""
    package = files("tilecraft_ascend_npu")
    return TargetSpec.from_yaml(
        package / "spec.yaml", plugin=TARGET_NAME,
        intrinsic_files=[package / "intrinsics" / name for name in INTRINSIC_FILES])

class AscendNpuTarget(DeclaredTarget):
    """Huawei Ascend NPUs: declarations today, AscendC-style C++ later (see the module)."""

    availability = AVAILABILITY

    @cached_property
    def spec(self) -> TargetSpec:
        return load_target_spec()

    @property
    def name(self) -> str:
        return TARGET_NAME

    def estimate(self, kernel: Kernel) -> Estimate:
        raise TargetError(f"target {self.name} cannot estimate kernel {kernel.name}: "
                          f"{AVAILABILITY.reasons['estimate']}")
