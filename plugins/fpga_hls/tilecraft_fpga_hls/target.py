"""The fpga_hls target: Vitis-HLS-style accelerators built around a MAC array.

Today the plugin is its data: :func:`~tilecraft_fpga_hls.spec.fpga_spec` sizes the MAC array
against a device (VU9P by default) and declares it as the intrinsic ``mac_array``. The HLS C++
code generator (C-simulated with g++), and the performance and resource model of Eq. 4.6,
come in a later issue; :meth:`FpgaHlsTarget.available` says so, and kernels run on the core's
Kernel IR emulator, ``mac_array`` calls by their declared semantics.

>>> target = FpgaHlsTarget(rows=4, cols=8, dtype="int8")
>>> target.available().capability.value
'emulate'
>>> print(target.spec.intrinsic("mac_array").compute.semantics)
Dst[i1, i2] += cast(int32, Src1[i1, r1]) * cast(int32, Src2[r1, i2])
"""

from __future__ import annotations

from functools import cached_property

from tilecraft.dtypes import DType
from tilecraft.errors import TargetError
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.target.base import Availability, Estimate
from tilecraft.target.declared import DeclaredTarget
from tilecraft.target.spec import TargetSpec
from tilecraft_fpga_hls.device import VU9P, DeviceSpec
from tilecraft_fpga_hls.spec import DEFAULT_SHAPE, TARGET_NAME, fpga_spec

NOT_YET = "not implemented yet: the HLS C++ code generator comes in a later issue"
AVAILABILITY = Availability(
    codegen=False, build=False, execute=False, emulate=True, estimate=False,
    reasons={
        "codegen": NOT_YET,
        "build": "nothing to build until code generation exists (then C-simulation with g++; "
                 "no Vitis HLS here)",
        "execute": "no FPGA board on this machine, and synthesis takes hours (the target "
                   "estimates instead of measuring)",
        "estimate": "not implemented yet: the performance and resource model (Eq. 4.6) comes "
                    "with the code generator",
    })

class FpgaHlsTarget(DeclaredTarget):
    """An HLS accelerator: a ``rows`` x ``cols`` MAC array of ``dtype`` on ``device``."""

    availability = AVAILABILITY

    def __init__(self, device: DeviceSpec = VU9P, rows: int = DEFAULT_SHAPE[0],
                 cols: int = DEFAULT_SHAPE[1], dtype: DType | str = DType.FLOAT32,
                 depth: int = 1) -> None:
        self.device = device
        self.shape = (rows, cols)
        self.dtype = DType.parse(dtype)
        self.depth = depth

    @cached_property
    def spec(self) -> TargetSpec:
        return fpga_spec(self.device, *self.shape, dtype=self.dtype, depth=self.depth)

    @property
    def name(self) -> str:
        return TARGET_NAME

    def estimate(self, kernel: Kernel) -> Estimate:
        raise TargetError(f"target {self.name} cannot estimate kernel {kernel.name}: "
                          f"{AVAILABILITY.reasons['estimate']}")
