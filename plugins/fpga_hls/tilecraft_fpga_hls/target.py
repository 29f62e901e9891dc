"""The fpga_hls target: Vitis-HLS-style accelerators built around a MAC array.

:func:`~tilecraft_fpga_hls.spec.fpga_spec` sizes the MAC array against a device (VU9P by
default) and declares it as the intrinsic ``mac_array``; the core lowers every compute into
FlexTensor's read / compute / write dataflow (thesis §4.5, Fig. 4.4c). The target generates
Vitis-HLS C++ for it (:mod:`.codegen`), runs that C++ by C-simulation with g++
(:mod:`.csim`), and estimates latency and resources with the model of Eq. 4.6
(:mod:`.model`); synthesis and a board are not here, and :meth:`FpgaHlsTarget.available`
says so.

>>> target = FpgaHlsTarget(rows=4, cols=8, dtype="int8")
>>> target.available().capability.value
'emulate'
>>> print(target.spec.intrinsic("mac_array").compute.semantics)
Dst[i1, i2] += cast(int32, Src1[i1, r1]) * cast(int32, Src2[r1, i2])
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.base import Availability, Estimate, KernelFunction, Source, TemplateSpace
from tilecraft.target.declared import DeclaredTarget
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor
from tilecraft_fpga_hls.device import VU9P, DeviceSpec
from tilecraft_fpga_hls.spec import DEFAULT_SHAPE, TARGET_NAME, fpga_spec


class FpgaHlsTarget(DeclaredTarget):
    """An HLS accelerator: a ``rows`` x ``cols`` MAC array of ``dtype`` on ``device``;
    ``model_default=False`` lowers untuned contractions by the core's dataflow lowering instead
    of the design the model picks."""

    def __init__(self, device: DeviceSpec = VU9P, rows: int = DEFAULT_SHAPE[0],
                 cols: int = DEFAULT_SHAPE[1], dtype: DType | str = DType.FLOAT32,
                 depth: int = 1, model_default: bool = True) -> None:
        self.device = device
        #: whether an untuned contraction takes the design the model picks (else the core's
        #: dataflow lowering)
        self.model_default = model_default
        self.shape = (rows, cols)
        self.dtype = DType.parse(dtype)
        self.depth = depth

    @cached_property
    def spec(self) -> TargetSpec:
        return fpga_spec(self.device, *self.shape, dtype=self.dtype, depth=self.depth)

    @property
    def name(self) -> str:
        return TARGET_NAME

    def available(self) -> Availability:
        """Code generation, C-simulation (where g++ is) and the model; no synthesis and no
        board here (:mod:`tilecraft_fpga_hls.availability`)."""
        from tilecraft_fpga_hls.availability import machine_availability

        return machine_availability()

    def template_space(self, tensor: Tensor) -> TemplateSpace | None:
        """The contraction template's space (:mod:`tilecraft_fpga_hls.template.space`): PE
        array shape, adder-tree width, buffer tiles, loop order, partitioning; the tuner
        searches it on the model (the spec's evaluation is ``estimate``)."""
        from tilecraft_fpga_hls.template.space import contraction_space

        return contraction_space(tensor)

    def lower_compute(self, tensor: Tensor, options: LoweringOptions,
                      config: Mapping[str, Any] | None = None) -> list[Kernel] | None:
        """With a template ``config`` (a point of :meth:`template_space`, e.g. from the tuning
        database), the contraction template's kernel
        (:mod:`tilecraft_fpga_hls.template.contraction`); without one, for a contraction, the
        design the model picks on the device
        (:func:`~tilecraft_fpga_hls.template.model_default_design`, its PE array, predicted
        time and resources in the kernel's ``schedule`` line of the report), and for anything
        else (or where nothing fits) the core's read / compute / write dataflow lowering. A
        config for a compute the template cannot take is a LoweringError naming it."""
        import dataclasses

        from tilecraft.errors import LoweringError
        from tilecraft_fpga_hls.template import (
            as_contraction,
            lower_contraction,
            model_default_design,
        )

        if not config:
            if not self.model_default:
                return None
            choice = model_default_design(tensor, self.device)
            if choice is None:
                return None
            kernel = lower_contraction(as_contraction(tensor), choice.config)  # type: ignore
            attrs = {**kernel.attrs, "schedule": choice.summary(),
                     "predicted_seconds": choice.estimate.seconds}
            return [dataclasses.replace(kernel, attrs=attrs)]

        view = as_contraction(tensor)
        if view is None:
            raise LoweringError(
                f"compute {tensor.name}: the fpga_hls contraction template was asked for, but "
                "it takes only sums of products of loads with affine, non-negative indices; "
                "drop the template parameters to use the dataflow lowering")
        return [lower_contraction(view, config)]

    def codegen(self, kernel: Kernel) -> Source:
        """The Vitis-HLS C++ unit of ``kernel``
        (:func:`tilecraft_fpga_hls.codegen.generate_hls`); a CodegenError names the construct
        or dtype it cannot express."""
        from tilecraft_fpga_hls.codegen import generate_hls

        return generate_hls(kernel, self.spec, target=self.name)

    def emulator(self, kernel: Kernel, source: Source) -> KernelFunction:
        """The generated C++ run by C-simulation (:mod:`tilecraft_fpga_hls.csim`); the Kernel
        IR interpreter where the source is not HLS C++ or no host compiler exists."""
        from tilecraft_fpga_hls.availability import csim_status
        from tilecraft_fpga_hls.codegen import LANGUAGE

        if source.language != LANGUAGE or not csim_status()[0]:
            return super().emulator(kernel, source)
        from tilecraft_fpga_hls.csim import CSimKernel

        return CSimKernel(source)

    def estimate(self, kernel: Kernel) -> Estimate:
        """The model's latency of ``kernel`` on the device (:mod:`tilecraft_fpga_hls.model`:
        Eq. 4.6 per dataflow stage, II and depth of each pipelined loop), with cycles,
        resources and each stage in ``detail``; an
        :class:`~tilecraft_fpga_hls.model.InfeasibleDesign` naming the resource where the
        design does not fit the device."""
        from tilecraft_fpga_hls.model import estimate_design

        design = estimate_design(kernel, self.device).check()
        return Estimate(design.seconds, design.detail())
