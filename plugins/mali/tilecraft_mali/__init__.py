"""tilecraft target plugin for Arm Mali (Bifrost) GPUs.

The spec (``spec.yaml``, Mali-G76 MP10 figures) and the intrinsic declarations
(``intrinsics/arm_dot.yaml``) are package data; :mod:`.target` ties them to the
:class:`~tilecraft.target.base.Target` contract. Discovery loads :func:`make_target` from the
entry point group ``tilecraft.targets``; nothing is read on import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilecraft_mali.target import MaliTarget

__version__ = "0.1.0"


def make_target() -> MaliTarget:
    """Entry point of the ``tilecraft.targets`` group: the mali target object."""
    from tilecraft_mali.target import MaliTarget

    return MaliTarget()


__all__ = ["__version__", "make_target"]
