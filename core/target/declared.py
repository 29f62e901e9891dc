"""A base for target plugins that declare their chip before they can generate code for it.

Such a plugin has its spec, memory hierarchy and intrinsics, an :class:`Availability` saying
why code generation and the rest are not there yet, and runs kernels on the core's Kernel IR
emulator after checking them against the spec (loop kinds, memory levels, intrinsics and their
operand shapes). Subclasses set ``availability`` and provide ``spec``.

>>> from tilecraft.target.base import Availability
>>> class Sketch(DeclaredTarget):
...     availability = Availability(codegen=False, build=False, execute=False, emulate=True,
...                                 estimate=False, reasons={"codegen": "not written yet"})
...     spec = None
...     name = "sketch"
>>> Sketch().available().capability.value
'emulate'
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tilecraft.errors import TargetError
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.target.base import Availability, Source, Target
from tilecraft.target.checks import check_kernel_supported


class DeclaredTarget(Target):
    """A target known by its declarations only: no code generator yet (see the module)."""

    #: what this machine can do with the target, and why not
    availability: Availability

    def available(self) -> Availability:
        return self.availability

    def codegen(self, kernel: Kernel) -> Source:
        reason = self.availability.reasons.get("codegen", "no code generator")
        raise TargetError(f"target {self.name} cannot generate code for kernel {kernel.name}: "
                          f"{reason}; emulate it with Target.emulate meanwhile")

    def emulate(self, kernel: Kernel, arrays: Mapping[str, np.ndarray]) -> None:
        """Run ``kernel`` on the Kernel IR interpreter after checking that it only uses what
        this target declares."""
        check_kernel_supported(kernel, self.spec)
        super().emulate(kernel, arrays)


__all__ = ["DeclaredTarget"]
