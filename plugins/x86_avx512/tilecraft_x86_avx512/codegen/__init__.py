"""Kernel IR to LLVM IR for AVX-512 CPUs (see :mod:`.module` for the entry-point ABI)."""

from tilecraft_x86_avx512.codegen.context import CodegenOptions
from tilecraft_x86_avx512.codegen.module import (
    ABI_VERSION,
    GeneratedModule,
    entry_name,
    generate_llvm_ir,
    kernel_meta,
)

__all__ = ["ABI_VERSION", "CodegenOptions", "GeneratedModule", "entry_name",
           "generate_llvm_ir", "kernel_meta"]
