"""The ascend_npu target: a Huawei Ascend 910-like NPU (32 Da Vinci AI cores).

The spec (GM, L1 1 MB, L0A / L0B 64 KB, L0C 256 KB, UB 256 KB) and the intrinsic declarations
(the Cube ``mad`` of Eq. 3.5 on 16x16 fractals, one repeat of each vector-unit operation) are
package data. Code generation writes AscendC-style C++ (:mod:`.codegen`); with no CANN
toolchain here, a kernel runs by compiling that source with g++ against the plugin's
emulation header and calling it on numpy buffers (:mod:`.emulation`, the target's
``emulator``); :meth:`AscendNpuTarget.emulate` still runs Kernel IR on the core's interpreter,
intrinsic calls by their declared semantics. :meth:`AscendNpuTarget.estimate` is the
performance model of :mod:`.model` (cycles per pipe stage, double-buffer overlap, AI cores).

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
from typing import Any

from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.base import Availability, Estimate, FusedGroup, KernelFunction, Source
from tilecraft.target.declared import DeclaredTarget
from tilecraft.target.spec import TargetSpec

TARGET_NAME = "ascend_npu"
INTRINSIC_FILES = ("cube.yaml", "vector.yaml")


@functools.cache
def load_target_spec() -> TargetSpec:
    """The spec of ``spec.yaml`` with the intrinsics of ``intrinsics/*.yaml`` (validated; a
    :class:`~tilecraft.errors.PluginError` names the file, intrinsic and field otherwise)."""
    package = files("tilecraft_ascend_npu")
    return TargetSpec.from_yaml(
        package / "spec.yaml", plugin=TARGET_NAME,
        intrinsic_files=[package / "intrinsics" / name for name in INTRINSIC_FILES])

class AscendNpuTarget(DeclaredTarget):
    """Huawei Ascend NPUs: AscendC-style C++, emulated on the host (see the module)."""

    def available(self) -> Availability:
        from tilecraft_ascend_npu.availability import machine_availability

        return machine_availability()

    def codegen(self, kernel: Kernel) -> Source:
        from tilecraft_ascend_npu.codegen.kernel import generate_ascendc

        return generate_ascendc(kernel, self.spec, self.name)

    def emulator(self, kernel: Kernel, source: Source) -> KernelFunction:
        """The generated AscendC source compiled against the emulation header (built once per
        source, here and now), or the Kernel IR interpreter for a source of another language
        or without a host compiler."""
        from tilecraft_ascend_npu.codegen.kernel import LANGUAGE
        from tilecraft_ascend_npu.emulation import EmulatedAscendKernel

        if source.language != LANGUAGE or not self.available().emulate:
            return super().emulator(kernel, source)
        return EmulatedAscendKernel(source)

    @cached_property
    def spec(self) -> TargetSpec:
        return load_target_spec()

    @property
    def name(self) -> str:
        return TARGET_NAME

    def fuse(self, graph: Graph, options: LoweringOptions,
             plan: Any = None) -> list[FusedGroup]:
        """The float16 GEMM chains Chimera's ``plan`` fuses become one Cube kernel each, the
        intermediate kept on the AI core (:mod:`.fusion`)."""
        from tilecraft_ascend_npu.fusion import fuse_gemm_chains

        return fuse_gemm_chains(graph, self.spec, plan)

    def estimate(self, kernel: Kernel) -> Estimate:
        """Cycles per pipe stage from the spec, overlapped by the double buffer, over the AI
        cores (:mod:`.model`); ``detail`` names the stages and the bound."""
        from tilecraft_ascend_npu.model import estimate_kernel, to_estimate

        return to_estimate(estimate_kernel(kernel, self.spec))
