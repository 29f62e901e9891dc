"""tilecraft target plugin for NVIDIA GPUs with Tensor Cores.

The spec (``spec.yaml``, A100-like figures) and the intrinsic declarations
(``intrinsics/wmma.yaml``, ``intrinsics/mma.yaml``) are package data; :mod:`.target` ties them
to the :class:`~tilecraft.target.base.Target` contract. Discovery loads :func:`make_target`
from the entry point group ``tilecraft.targets``; nothing is read on import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilecraft_nvidia_tc.target import NvidiaTcTarget

__version__ = "0.1.0"


def make_target() -> NvidiaTcTarget:
    """Entry point of the ``tilecraft.targets`` group: the nvidia_tc target object."""
    from tilecraft_nvidia_tc.target import NvidiaTcTarget

    return NvidiaTcTarget()


__all__ = ["__version__", "make_target"]
