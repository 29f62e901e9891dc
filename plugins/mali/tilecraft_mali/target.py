"""The mali target: an Arm Mali-G76 (Bifrost) GPU programmed in OpenCL C.

Today the plugin is its data: the spec (memory levels global / local / private, 10 cores at
720 MHz) and the declarations of ``arm_dot`` and ``arm_dot_acc`` (4 x int8 → int32, extension
cl_arm_integer_dot_product). The OpenCL C code generator (run on PoCL here, with ``arm_dot``
polyfilled where the extension is absent) comes in a later issue; :meth:`MaliTarget.available`
says so, and kernels run on the core's Kernel IR emulator, intrinsic calls by their declared
semantics.

>>> target = MaliTarget()
>>> target.available().capability.value
'emulate'
>>> target.spec.memory.names
('global', 'local', 'private')
>>> [intrinsic.name for intrinsic in target.spec.intrinsics]
['arm_dot', 'arm_dot_acc']
"""

from __future__ import annotations

import functools
from functools import cached_property
from importlib.resources import files

from tilecraft.target.base import Availability
from tilecraft.target.declared import DeclaredTarget
from tilecraft.target.spec import TargetSpec

TARGET_NAME = "mali"
INTRINSIC_FILES = ("arm_dot.yaml",)

NOT_YET = "not implemented yet: the OpenCL C code generator comes in a later issue"
AVAILABILITY = Availability(
    codegen=False, build=False, execute=False, emulate=True, estimate=False,
    reasons={
        "codegen": NOT_YET,
        "build": "nothing to build until code generation exists (then the OpenCL driver, or "
                 "PoCL on the CPU with arm_dot polyfilled)",
        "execute": "no launch path yet (pyopencl on a Mali device)",
        "estimate": "no performance model (the target measures)",
    })

@functools.cache
def load_target_spec() -> TargetSpec:
    """The spec of ``spec.yaml`` with the intrinsics of ``intrinsics/*.yaml`` (validated; a
    :class:`~tilecraft.errors.PluginError` names the file, intrinsic and field otherwise)."""
    package = files("tilecraft_mali")
    return TargetSpec.from_yaml(
        package / "spec.yaml", plugin=TARGET_NAME,
        intrinsic_files=[package / "intrinsics" / name for name in INTRINSIC_FILES])

class MaliTarget(DeclaredTarget):
    """Arm Mali GPUs: declarations today, OpenCL C later (see the module)."""

    availability = AVAILABILITY

    @cached_property
    def spec(self) -> TargetSpec:
        return load_target_spec()

    @property
    def name(self) -> str:
        return TARGET_NAME
