"""The generated CUDA source, run on the CPU: the same ``.cu`` text compiled by the host C++
compiler against ``include/tilecraft_cuda_emulation.h`` (threads of a block as fibers,
``__syncthreads`` a real barrier, warp collectives as rendezvous, ``cp.async`` deferred to its
wait) and called on numpy buffers, in more than one interleaving of the threads.

>>> from tilecraft_nvidia_tc.emulation import include_dir
>>> (include_dir() / "tilecraft_cuda.h").is_file()
True
"""

from tilecraft_nvidia_tc.emulation.compiler import (
    EmulationLibrary,
    compile_emulation,
    find_host_compiler,
    include_dir,
)
from tilecraft_nvidia_tc.emulation.harness import harness_text
from tilecraft_nvidia_tc.emulation.runner import EmulatedKernel, EmulationError, emulate_source

__all__ = ["EmulatedKernel", "EmulationError", "EmulationLibrary", "compile_emulation",
           "emulate_source", "find_host_compiler", "harness_text", "include_dir"]
