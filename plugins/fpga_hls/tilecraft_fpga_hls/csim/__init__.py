"""C-simulation of generated HLS C++: the source compiled with the host's g++ against the
plugin's ``ap_int.h`` / ``hls_half.h`` / ``hls_stream.h`` (:mod:`.compiler`, cached by content
hash) and called on numpy buffers through a small generated harness and ctypes
(:mod:`.harness`, :mod:`.runner`).

Dataflow stages run one after another in program order, as Vitis HLS's C-simulation runs them,
so a stream holds everything its producer writes before the consumer starts (an unbounded FIFO
here; the declared depth sizes the hardware FIFO). A stage that reads an empty stream, or a
region that leaves values unread, is a :class:`CSimulationError` naming the stream.
"""

from tilecraft_fpga_hls.csim.compiler import CSimLibrary, compile_csim, find_host_compiler
from tilecraft_fpga_hls.csim.runner import CSimError, CSimKernel

__all__ = ["CSimError", "CSimKernel", "CSimLibrary", "compile_csim", "find_host_compiler"]
