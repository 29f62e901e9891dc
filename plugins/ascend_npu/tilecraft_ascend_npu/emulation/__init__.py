"""Running generated AscendC-style C++ on the host: :mod:`.compiler` builds it with g++ against
the plugin's emulation header (``include/tilecraft_ascendc.h``), :mod:`.runner` calls it on
numpy buffers."""

from tilecraft_ascend_npu.emulation.compiler import (
    AscendLibrary,
    build_library,
    host_compiler,
)
from tilecraft_ascend_npu.emulation.runner import AscendEmulationError, EmulatedAscendKernel

__all__ = ["AscendEmulationError", "AscendLibrary", "EmulatedAscendKernel", "build_library",
           "host_compiler"]
