"""Kernel IR -> AscendC-style C++: :mod:`.kernel` (the source, through the templates),
:mod:`.statements` (the body), :mod:`.patterns` (nests that become AscendC calls),
:mod:`.buffers` (queues and buffers of the pipe), :mod:`.dialect` (element types)."""

from tilecraft_ascend_npu.codegen.kernel import LANGUAGE, generate_ascendc

__all__ = ["LANGUAGE", "generate_ascendc"]
