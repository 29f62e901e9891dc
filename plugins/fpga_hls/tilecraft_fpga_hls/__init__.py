"""tilecraft target plugin for FPGAs programmed through high-level synthesis (Vitis HLS style).

The spec is built in Python from a device description and the shape of the MAC array
(:func:`~tilecraft_fpga_hls.spec.fpga_spec`); :mod:`.target` ties it to the
:class:`~tilecraft.target.base.Target` contract. Discovery loads :func:`make_target` (the
default: a 32x32 float32 array on a VU9P) from the entry point group ``tilecraft.targets``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilecraft_fpga_hls.target import FpgaHlsTarget

__version__ = "0.1.0"


def make_target() -> FpgaHlsTarget:
    """Entry point of the ``tilecraft.targets`` group: the fpga_hls target object."""
    from tilecraft_fpga_hls.target import FpgaHlsTarget

    return FpgaHlsTarget()


__all__ = ["__version__", "make_target"]
