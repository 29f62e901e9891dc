"""The nvidia_tc target: an NVIDIA GPU with Tensor Cores (A100-like, sm_80; builds for sm_80 and
sm_90).

The spec (memory levels global / L2 / shared / fragment, 108 SMs, the thread hierarchy with
cp.async) and the intrinsic declarations (12 WMMA ``mma_sync`` variants with their
``load_matrix_sync`` / ``store_matrix_sync`` / ``fill_fragment`` companions, 4 ``mma.sync``
m16n8k16 variants) are data. The stages:

- lowering: float contractions (dense, matmul, batch_matmul, gemv, convolutions seen as
  implicit GEMM) go through the core's shared-memory tiled GEMM template
  (:mod:`tilecraft.schedule.strategies.gpu_contraction`: BM x BN blocks of TM x TN register
  tiles, BK slices staged in shared memory, double-buffered with cp.async), whose tiles are
  tunable (:meth:`NvidiaTcTarget.template_space`); everything else takes the core's GPU
  strategy;
- codegen: Kernel IR to CUDA C (:mod:`tilecraft_nvidia_tc.codegen`);
- build: NVRTC from pip (or nvcc) for every architecture of the spec, with registers, shared
  memory, spills and occupancy (:mod:`tilecraft_nvidia_tc.build`);
- run: the generated source on the CPU against the emulation header where no GPU exists
  (:mod:`tilecraft_nvidia_tc.emulation`), the driver API where one does
  (:mod:`tilecraft_nvidia_tc.launch`). :meth:`NvidiaTcTarget.available` says which work here;
- estimate: the performance model (:mod:`tilecraft_nvidia_tc.model`), predicted time and
  bound per kernel, also in the compile report's build lines.

The default target is the A100 (sm_80); ``nvidia_tc:h100`` is the H100 SXM5 (sm_90) variant
(:mod:`tilecraft_nvidia_tc.variants`).

>>> target = NvidiaTcTarget()
>>> target.spec.memory.names
('global', 'L2', 'shared', 'fragment')
>>> target.spec.intrinsic("wmma_m32n8k16_f16_f32").compute.destination.shape
(32, 8)
>>> from tilecraft import ops, te
>>> C = ops.matmul(te.placeholder((64, 64), name="A"), te.placeholder((64, 64), name="B"))
>>> sorted(target.template_space(C).decode(target.template_space(C).space.random_point(
...     __import__("numpy").random.default_rng(0))))
['BK', 'BM', 'BN', 'TM', 'TN', 'stages']
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from functools import cached_property
from importlib.resources import files
from typing import Any

from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.base import (
    Artifact,
    Availability,
    Estimate,
    FusedGroup,
    KernelFunction,
    LoweringEstimate,
    Source,
    TemplateSpace,
)
from tilecraft.target.declared import DeclaredTarget
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor

TARGET_NAME = "nvidia_tc"
INTRINSIC_FILES = ("wmma.yaml", "mma.yaml")

NOT_YET = "not implemented yet: the CUDA C code generator comes in a later issue"
AVAILABILITY = Availability(
    codegen=False, build=False, execute=False, emulate=True, estimate=True,
    reasons={
        "codegen": NOT_YET,
        "build": "nothing to build until code generation exists (nvcc / NVRTC for sm_80, "
                 "sm_90 planned)",
        "execute": "no launch path yet (cuda-python, where a GPU exists)",
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
    """NVIDIA Tensor Core GPUs: CUDA C, NVRTC builds, emulation or launch (see the module)."""

    availability = AVAILABILITY

    def available(self) -> Availability:
        """The build and launch stages as this machine has them (NVRTC or nvcc; a CUDA
        driver and device), see :mod:`tilecraft_nvidia_tc.availability`; code generation
        as this class has it; emulation always (the Kernel IR interpreter at least); the
        performance model always (:mod:`tilecraft_nvidia_tc.model`)."""
        from tilecraft_nvidia_tc.availability import machine_availability

        has_codegen = type(self).codegen is not DeclaredTarget.codegen
        codegen = (True, "") if has_codegen else (False, AVAILABILITY.reasons["codegen"])
        machine = machine_availability(codegen)
        reasons = dict(machine.reasons)
        if not machine.emulate:
            reasons["emulate"] = (f"{reasons['emulate']}; kernels run on the Kernel IR "
                                  "interpreter instead")
        return Availability(codegen=machine.codegen, build=machine.build,
                            execute=machine.execute and machine.codegen, emulate=True,
                            estimate=True, reasons=reasons)

    def codegen(self, kernel: Kernel) -> Source:
        """The CUDA C translation unit of ``kernel`` with its launch in ``meta``
        (:func:`tilecraft_nvidia_tc.codegen.generate_cuda`); a CodegenError names the
        construct, limit or dtype it cannot express. ``meta["model_profile"]`` carries the
        performance model's counts of the kernel, which :meth:`build` joins to the
        resources it reports."""
        import dataclasses

        from tilecraft_nvidia_tc.codegen import generate_cuda
        from tilecraft_nvidia_tc.fusion import fused_config, fused_profile, fused_source
        from tilecraft_nvidia_tc.model import profile_for

        if fused_config(kernel) is not None:  # a fused chain: the plugin's template
            source = fused_source(kernel, self.spec, target=self.name)
            return dataclasses.replace(source, meta={
                **source.meta, "model_profile": fused_profile(kernel).as_dict()})
        source = generate_cuda(kernel, self.spec, target=self.name)
        profile = profile_for(kernel, self.spec).as_dict()
        return dataclasses.replace(source, meta={**source.meta, "model_profile": profile})

    def build(self, source: Source) -> Artifact:
        """NVRTC (or nvcc) builds of ``source`` for every architecture of the spec, with the
        resource report and occupancy per architecture in ``Artifact.meta["build"]``; the
        artifact's ``path`` is the cubin of the spec's own chip, its ``handle`` the
        :class:`~tilecraft_nvidia_tc.build.CudaBuild`; the summary's line of the spec's own
        chip ends with the model's predicted time and bound, with the built registers and
        shared memory. A failure is a :class:`~tilecraft_nvidia_tc.build.CudaBuildError` with the
        repro command."""
        from tilecraft_nvidia_tc.build import BuildOptions, LaunchShape, build_cuda

        threads = self.spec.threads
        options = BuildOptions(architectures=threads.architectures) \
            if threads is not None and threads.architectures else BuildOptions()
        built = build_cuda(source.text, source.kernel_name,
                           entry=str(source.meta.get("entry") or source.entry), options=options,
                           launch=LaunchShape.from_meta(source.meta), threads=threads)
        report = built.report()
        lines = built.summary().splitlines()
        model = self._model_summary(source.meta.get("model_profile"), report)
        if model and lines:  # on the line of the spec's own chip (built first)
            lines[0] = f"{lines[0]}; {model}"
        return Artifact(self.name, source.kernel_name, path=built.architectures[0].cubin_path,
                        handle=built, meta={"build": report, "summary": "\n".join(lines),
                                            "params": list(source.meta.get("params", ()))})

    def _model_summary(self, profile: Mapping[str, Any] | None,
                       report: Mapping[str, Any]) -> str:
        """The model's line for the compile report ('' without the codegen's counts)."""
        from tilecraft.errors import TargetError
        from tilecraft_nvidia_tc.model import KernelProfile, estimate_profile

        if not profile:
            return ""
        try:
            return estimate_profile(KernelProfile.from_dict(profile), self.spec,
                                    report).summary()
        except TargetError as err:
            return f"model: {err}"

    def estimate(self, kernel: Kernel) -> Estimate:
        """The predicted time of ``kernel`` on the spec's GPU (A100; H100 for
        ``nvidia_tc:h100``) by :mod:`tilecraft_nvidia_tc.model`: a roofline per memory level
        inside AMOS's hierarchical model, with the occupancy of registers and shared memory
        estimated from the Kernel IR; ``detail`` has each term's seconds, the waves and
        occupancy, and ``bound_<name>`` = 1 for the bound (compute, tensor_core, shared,
        latency, L2, DRAM)."""
        from tilecraft_nvidia_tc.fusion import fused_config, fused_profile
        from tilecraft_nvidia_tc.model import estimate_kernel, estimate_profile

        model = estimate_profile(fused_profile(kernel), self.spec) \
            if fused_config(kernel) is not None else estimate_kernel(kernel, self.spec)
        return Estimate(model.seconds, model.detail())

    def fuse(self, graph: Graph, options: LoweringOptions,
             plan: Any = None) -> list[FusedGroup]:
        """Chimera's planned float16 GEMM chains and attention (batch GEMM -> softmax -> batch
        GEMM) as one CUDA kernel each, tiles from the solver within the spec's shared memory
        and registers (:mod:`tilecraft_nvidia_tc.fusion`); a note for each chain left apart."""
        from tilecraft_nvidia_tc.fusion import fuse_chains

        return fuse_chains(graph, self.spec, plan)

    def variants(self) -> dict[str, str]:
        """The chips of ``variants/variants.yaml`` (``nvidia_tc:h100``), each with its
        description; plain ``nvidia_tc`` is the A100."""
        from tilecraft_nvidia_tc.variants import known_variants

        return {name: " ".join(decl.description.split())
                for name, decl in known_variants().items()}

    def with_variant(self, variant: str) -> NvidiaTcTarget:
        """This target with the spec of ``variant`` (a TargetError naming the known ones
        otherwise)."""
        from tilecraft_nvidia_tc.variants import known_variants

        if variant not in known_variants():
            return super().with_variant(variant)  # type: ignore[return-value]
        return NvidiaTcVariantTarget(variant)

    def load(self, artifact: Artifact) -> KernelFunction:
        """The built kernel launched on this machine's GPU (cuda-python, or pycuda), called
        with arrays by parameter name; a TargetError saying why where there is no GPU."""
        from tilecraft_nvidia_tc.launch import make_launcher, parameters_from_meta

        return make_launcher(artifact.handle, parameters_from_meta(artifact.meta))

    def emulator(self, kernel: Kernel, source: Source) -> KernelFunction:
        """Where no GPU runs it: the generated CUDA source itself, compiled once for the host
        against the emulation header and run in two interleavings of its threads
        (:mod:`tilecraft_nvidia_tc.emulation`); the Kernel IR interpreter where the source is
        not CUDA or no host C++ compiler exists."""
        from tilecraft_nvidia_tc.availability import emulate_status

        if source.language != "cuda" or not emulate_status()[0]:
            return super().emulator(kernel, source)
        from tilecraft_nvidia_tc.emulation import EmulatedKernel

        return EmulatedKernel(source)

    def template_space(self, tensor: Tensor) -> TemplateSpace | None:
        """For a contraction AMOS maps onto the Tensor Cores, the mapping (WMMA or mma.sync, or
        the CUDA-core template) with the Tensor Core kernel's tiles
        (:mod:`tilecraft_nvidia_tc.tensor_core_space`); else the tiles of the GPU contraction
        template (``BM, BN, BK, TM, TN, stages``) for a float contraction; ``None`` for any
        other compute."""
        from tilecraft.schedule.strategies.gpu_contraction import contraction_template_space
        from tilecraft_nvidia_tc.tensor_core_space import tensor_core_space

        space = tensor_core_space(tensor, self)
        if space is not None:
            return space
        return contraction_template_space(tensor, LoweringOptions.from_spec(self.spec))

    def native_lowering(self, tensor: Tensor,
                        options: LoweringOptions) -> LoweringEstimate | None:
        """The tiled CUDA-core GEMM template's predicted time for a float contraction (a
        roofline at the float32 rate of every SM, :mod:`tilecraft_nvidia_tc.native_estimate`),
        which the mapping stage weighs against the Tensor Core mapping; ``None`` otherwise."""
        from tilecraft_nvidia_tc.native_estimate import template_estimate

        return template_estimate(tensor, options)

    def lower_mapped(self, compute: Tensor, physical: Any,
                     options: LoweringOptions) -> list[Kernel] | None:
        """A compute tensorized onto a WMMA or an mma.sync intrinsic (a verified AMOS mapping)
        as the warp-tiled Tensor Core kernel of :mod:`tilecraft_nvidia_tc.tensor_cores`
        (``nvcuda::wmma`` calls, or inline-PTX ``mma.sync.aligned.m16n8k16``); ``None`` (the
        core's serial nest) for other intrinsics."""
        from tilecraft_nvidia_tc.tensor_cores import lower_tensor_core_mapping

        return lower_tensor_core_mapping(compute, physical, options)

    def lower_compute(self, tensor: Tensor, options: LoweringOptions,
                      config: Mapping[str, Any] | None = None) -> list[Kernel] | None:
        """A float contraction as the shared-memory tiled GEMM kernel (``config``: its tiles,
        ``None``: the default for the spec); ``None`` (the core's GPU strategy) for anything
        else. A config over a limit of the spec is a LoweringError naming it."""
        from tilecraft.schedule.strategies.gpu_contraction import lower_tiled_contraction

        if config and "intrinsic" in config:  # a Tensor Core point of template_space
            from tilecraft_nvidia_tc.tensor_core_space import lower_tensor_core_config

            return lower_tensor_core_config(tensor, self.spec, options, config)
        kernel = lower_tiled_contraction(tensor, options, config)
        if kernel is None:
            if config:
                raise LoweringError(
                    f"compute {tensor.name}: template parameters {dict(config)} were given, but "
                    f"{self.name}'s tiled contraction template does not apply to it (not a "
                    "float contraction); drop the config")
            return None
        return [kernel]

    @cached_property
    def spec(self) -> TargetSpec:
        """The A100 spec, evaluating tuning candidates by the model where no GPU runs them
        (:func:`tilecraft_nvidia_tc.tensor_core_space.evaluated_here`)."""
        from tilecraft_nvidia_tc.tensor_core_space import evaluated_here

        return evaluated_here(load_target_spec())

    @property
    def name(self) -> str:
        return TARGET_NAME


class NvidiaTcVariantTarget(NvidiaTcTarget):
    """The nvidia_tc target with a variant's spec (``nvidia_tc:h100``,
    :mod:`tilecraft_nvidia_tc.variants`); named ``nvidia_tc:<variant>``."""

    def __init__(self, variant: str) -> None:
        self.variant = variant

    @cached_property
    def spec(self) -> TargetSpec:
        from tilecraft_nvidia_tc.tensor_core_space import evaluated_here
        from tilecraft_nvidia_tc.variants import load_variant_spec

        return evaluated_here(load_variant_spec(self.variant))

    @property
    def name(self) -> str:
        return f"{TARGET_NAME}:{self.variant}"
