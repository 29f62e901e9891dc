"""Building CUDA C for the nvidia_tc target: NVRTC (pip, the default) or nvcc
(:mod:`.compilers`) to PTX and cubin for sm_80 and sm_90, cached on disk (:mod:`.cache`), with
each kernel's registers, shared memory, spills (:mod:`.resources`) and occupancy
(:mod:`.occupancy`), put together by :mod:`.compiler`; where the tools are (:mod:`.tools`).
``python -m tilecraft_nvidia_tc.build FILE --arch sm_80`` repeats one build and prints its log
(the repro command of a :class:`CudaBuildError`).
"""

from __future__ import annotations

from tilecraft_nvidia_tc.toolchain.compiler import (
    ArchitectureBuild,
    BuildOptions,
    CudaBuild,
    CudaBuildError,
    LaunchShape,
    build_cuda,
)
from tilecraft_nvidia_tc.toolchain.occupancy import Occupancy, occupancy
from tilecraft_nvidia_tc.toolchain.resources import KernelResources

__all__ = ["ArchitectureBuild", "BuildOptions", "CudaBuild", "CudaBuildError",
           "KernelResources", "LaunchShape", "Occupancy", "build_cuda", "occupancy"]
