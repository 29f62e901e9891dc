"""The mali target: an Arm Mali-G76 (Bifrost) GPU programmed in OpenCL C.

The spec (memory levels global / local / private, 10 cores at 720 MHz; a work-group thread
hierarchy), the declarations of ``arm_dot`` and ``arm_dot_acc`` (4 x int8 -> int32, extension
cl_arm_integer_dot_product), and the stages: :meth:`MaliTarget.lower_compute` (float
contractions through the core's GPU tiled-contraction template, tiles staged in ``__local``
memory between work-group barriers; tunable through :meth:`MaliTarget.template_space`),
:meth:`MaliTarget.codegen` (OpenCL C,
:mod:`tilecraft_mali.codegen`), :meth:`MaliTarget.build` and :meth:`MaliTarget.load`
(pyopencl, :mod:`tilecraft_mali.runtime`). Without a Mali GPU the generated OpenCL C runs on
whatever OpenCL device is here — PoCL's CPU device, from ``pip install
pocl-binary-distribution`` — as a stand-in (:meth:`MaliTarget.emulator`), and
:meth:`MaliTarget.available` says which device it is.

>>> target = MaliTarget()
>>> target.available().codegen
True
>>> target.spec.memory.names
('global', 'local', 'private')
>>> [intrinsic.name for intrinsic in target.spec.intrinsics]
['arm_dot', 'arm_dot_acc']
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from functools import cached_property
from importlib.resources import files
from typing import Any

from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.base import (
    Artifact,
    Availability,
    Estimate,
    KernelFunction,
    Source,
    TemplateSpace,
)
from tilecraft.target.declared import DeclaredTarget
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor

TARGET_NAME = "mali"
INTRINSIC_FILES = ("arm_dot.yaml",)


@functools.cache
def load_target_spec() -> TargetSpec:
    """The spec of ``spec.yaml`` with the intrinsics of ``intrinsics/*.yaml`` (validated; a
    :class:`~tilecraft.errors.PluginError` names the file, intrinsic and field otherwise)."""
    package = files("tilecraft_mali")
    return TargetSpec.from_yaml(
        package / "spec.yaml", plugin=TARGET_NAME,
        intrinsic_files=[package / "intrinsics" / name for name in INTRINSIC_FILES])

class MaliTarget(DeclaredTarget):
    """Arm Mali GPUs through OpenCL C (see the module)."""

    def available(self) -> Availability:
        """Code generation always; build where an OpenCL device answers; execute on a Mali
        GPU; emulate always (the generated OpenCL C on a stand-in device, else the Kernel IR
        interpreter), see :mod:`tilecraft_mali.availability`."""
        from tilecraft_mali.availability import machine_availability

        return machine_availability()

    def codegen(self, kernel: Kernel) -> Source:
        """The OpenCL C program of ``kernel`` with its launch in ``meta``
        (:func:`tilecraft_mali.codegen.generate_opencl`); a CodegenError names the construct,
        limit or dtype it cannot express."""
        import dataclasses

        from tilecraft_mali.codegen import generate_opencl
        from tilecraft_mali.model import estimate_kernel

        source = generate_opencl(kernel, self.spec, target=self.name)
        model = estimate_kernel(kernel, self.spec).summary()
        return dataclasses.replace(source, meta={**source.meta, "model": model})

    def build(self, source: Source) -> Artifact:
        """``source`` built for this machine's OpenCL device (cached per text); a BuildError
        carries the compiler's log and the path of the source file, a CodegenError names the
        kernel and the device limit its ``__local`` memory exceeds."""
        from tilecraft_mali.runtime.program import build_program

        meta = source.meta
        built = build_program(source.text, source.kernel_name,
                              local_bytes=int(meta.get("local_bytes", 0)),
                              work_group=tuple(meta.get("local_size", (1, 1, 1))))
        summary = str(meta.get("model", ""))
        return Artifact(self.name, source.kernel_name, path=built.path, handle=built,
                        meta={**meta, "device": built.device.name, "summary": summary})

    def estimate(self, kernel: Kernel) -> Estimate:
        """The roofline estimate of ``kernel`` on the spec's Mali-G76 MP10
        (:mod:`tilecraft_mali.model`): ``max(operations / peak(dtype), bytes / bandwidth)``,
        the terms and the bound (``compute_bound`` 1 or 0) in ``detail``."""
        from tilecraft_mali.model import estimate_kernel

        model = estimate_kernel(kernel, self.spec)
        return Estimate(model.seconds, {**model.detail(),
                                        "compute_bound": float(model.bound == "compute")})

    def load(self, artifact: Artifact) -> KernelFunction:
        """The built kernel called with arrays by parameter name (pyopencl)."""
        from tilecraft_mali.runtime.launch import OpenCLKernel

        return OpenCLKernel(artifact.handle, artifact.meta)

    def emulator(self, kernel: Kernel, source: Source) -> KernelFunction:
        """Where no Mali GPU runs it: the generated OpenCL C on this machine's OpenCL device
        (PoCL's CPU device), built once; the Kernel IR interpreter where no device answers or
        the source is not OpenCL C."""
        if source.language != "opencl" or not self.available().build:
            return super().emulator(kernel, source)
        return self.load(self.build(source))

    def template_space(self, tensor: Tensor) -> TemplateSpace | None:
        """The tiles of the core's GPU contraction template (``BM, BN, BK, TM, TN, stages``;
        ``stages`` is 1 on Mali: no asynchronous copies) for a float contraction; ``None`` for
        any other compute."""
        from tilecraft.schedule.strategies.gpu_contraction import contraction_template_space

        return contraction_template_space(tensor, LoweringOptions.from_spec(self.spec))

    def lower_compute(self, tensor: Tensor, options: LoweringOptions,
                      config: Mapping[str, Any] | None = None) -> list[Kernel] | None:
        """A float contraction (matmul, dense, batch_matmul, convolutions as implicit GEMM) as
        the core's tiled GEMM kernel: ``BK`` slices of both operands staged in ``__local``
        memory between work-group barriers, ``TM x TN`` results per work-item in private
        registers (``config``: its tiles, ``None``: the default for the spec); ``None`` (the
        core's GPU strategy) for anything else. A config over a limit of the spec (work-group
        size, 32 KB of ``__local``) is a LoweringError naming it."""
        from tilecraft.schedule.strategies.gpu_contraction import lower_tiled_contraction

        kernel = lower_tiled_contraction(tensor, options, config)
        if kernel is None:
            if config:
                raise LoweringError(
                    f"compute {tensor.name}: template parameters {dict(config)} were given, but "
                    f"{self.name}'s tiled contraction template does not apply to it (not a "
                    "float contraction); drop the config")
            return None
        return [kernel]

    def lower_mapped(self, compute: Tensor, physical: Any,
                     options: LoweringOptions) -> list[Kernel] | None:
        """A compute tensorized onto ``arm_dot`` / ``arm_dot_acc`` (a verified AMOS mapping)
        as one work-item per output element, reducing four int8 lanes per call on private
        registers (:mod:`tilecraft_mali.dot_lowering`)."""
        from tilecraft_mali.dot_lowering import lower_dot_mapping

        return lower_dot_mapping(compute, physical, options)

    def variants(self) -> dict[str, str]:
        """``mali:stand_in``: executed, measured and tuned on this machine's OpenCL device
        (:mod:`tilecraft_mali.stand_in`)."""
        from tilecraft_mali.stand_in import STAND_IN, STAND_IN_DESCRIPTION

        return {STAND_IN: STAND_IN_DESCRIPTION}

    def with_variant(self, variant: str) -> MaliTarget:
        """The target for ``variant`` (a TargetError naming the known ones otherwise)."""
        from tilecraft_mali.stand_in import STAND_IN, MaliOnStandIn

        if variant != STAND_IN:
            return super().with_variant(variant)  # type: ignore[return-value]
        return MaliOnStandIn()

    @cached_property
    def spec(self) -> TargetSpec:
        return load_target_spec()

    @property
    def name(self) -> str:
        return TARGET_NAME
