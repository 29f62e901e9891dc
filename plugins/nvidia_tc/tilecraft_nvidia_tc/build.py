"""The nvidia_tc build stage: CUDA C to PTX and cubin for sm_80 and sm_90 with each kernel's
resource report (the parts live in :mod:`tilecraft_nvidia_tc.toolchain`), and its command line

``python -m tilecraft_nvidia_tc.build FILE.cu [--arch sm_80] [--compiler nvrtc|nvcc]
[--entry NAME]``: build one CUDA C file as the target does and print the resource report, or
the compiler's log and exit status 1 when it fails — the repro command of a build error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tilecraft.errors import TilecraftError
from tilecraft_nvidia_tc.toolchain.compiler import (
    COMPILERS,
    BuildOptions,
    CudaBuild,
    CudaBuildError,
    LaunchShape,
    build_cuda,
)
from tilecraft_nvidia_tc.toolchain.occupancy import Occupancy, occupancy
from tilecraft_nvidia_tc.toolchain.resources import KernelResources


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilecraft_nvidia_tc.build",
                                     description=__doc__)
    parser.add_argument("file", type=Path, help="the CUDA C source (.cu)")
    parser.add_argument("--arch", action="append", dest="architectures",
                        help="sm_80, sm_90 (repeatable; default: both)")
    parser.add_argument("--compiler", choices=COMPILERS, default=None)
    parser.add_argument("--entry", help="the kernel's name (default: the file's stem)")
    args = parser.parse_args(argv)
    try:
        text = args.file.read_text(encoding="utf-8")
    except OSError as err:
        print(f"cannot read {args.file}: {err}", file=sys.stderr)
        return 2
    options = BuildOptions(**{key: value for key, value in (
        ("architectures", tuple(args.architectures or ())),
        ("compiler", args.compiler)) if value})
    from tilecraft_nvidia_tc.target import load_target_spec

    try:
        built = build_cuda(text, args.file.stem, entry=args.entry, options=options,
                           threads=load_target_spec().threads)
    except TilecraftError as err:
        print(err, file=sys.stderr)
        return 1
    print(built.summary())
    return 0


__all__ = ["BuildOptions", "CudaBuild", "CudaBuildError", "KernelResources", "LaunchShape",
           "Occupancy", "build_cuda", "main", "occupancy"]


if __name__ == "__main__":
    sys.exit(main())
