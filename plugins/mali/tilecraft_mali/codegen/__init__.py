"""The OpenCL C code generator of the mali target: Kernel IR to one OpenCL C program per
kernel, through the Jinja templates in ``tilecraft_mali/templates``.

Expressions, identifiers and launch configuration come from the core
(:mod:`tilecraft.codegen`); here: :mod:`.dialect` (OpenCL C types and half storage),
:mod:`.memory` (``__local`` and private buffers), :mod:`.statements`, :mod:`.vector`
(``vloadN``), :mod:`.reduction` (subgroup reductions through ``__local`` memory),
:mod:`.kernel` (the program and its launch).
"""

from tilecraft_mali.codegen.kernel import LANGUAGE, generate_opencl

__all__ = ["LANGUAGE", "generate_opencl"]
