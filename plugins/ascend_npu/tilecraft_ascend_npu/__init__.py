"""tilecraft target plugin for Huawei Ascend NPUs (Da Vinci AI cores).

The spec (``spec.yaml``, Ascend 910-like figures of thesis §3.6.1) and the intrinsic
declarations (``intrinsics/cube.yaml``, ``intrinsics/vector.yaml``) are package data;
:mod:`.target` ties them to the :class:`~tilecraft.target.base.Target` contract. Discovery
loads :func:`make_target` from the entry point group ``tilecraft.targets``; nothing is read on
import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilecraft_ascend_npu.target import AscendNpuTarget

__version__ = "0.1.0"


def make_target() -> AscendNpuTarget:
    """Entry point of the ``tilecraft.targets`` group: the ascend_npu target object."""
    from tilecraft_ascend_npu.target import AscendNpuTarget

    return AscendNpuTarget()


__all__ = ["__version__", "make_target"]
