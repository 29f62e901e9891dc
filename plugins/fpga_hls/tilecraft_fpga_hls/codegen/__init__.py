"""The HLS C++ code generator of the fpga_hls target: Kernel IR to one Vitis-HLS-style ``.cpp``
per kernel, through the Jinja template in ``tilecraft_fpga_hls/templates``; C expressions are
printed by the core (:mod:`tilecraft.codegen`) in the :class:`~.dialect.HlsDialect`.

One concern per module: :mod:`.dialect` (HLS element types), :mod:`.scope` (what a dataflow
stage takes as parameters), :mod:`.statements` (loops, pragmas, dataflow regions, streams,
the MAC array), :mod:`.kernel` (the unit, its top function's interfaces and metadata).
"""

from tilecraft_fpga_hls.codegen.kernel import LANGUAGE, SUFFIX, generate_hls

__all__ = ["LANGUAGE", "SUFFIX", "generate_hls"]
