"""Kernel IR: loops with kinds, buffers in memory levels, statements (see :mod:`.nodes`)."""

from tilecraft.kernel_ir.nodes import (
    Allocate,
    ArrayPartition,
    Barrier,
    Buffer,
    BufferLoad,
    Copy,
    For,
    IfThenElse,
    IntrinsicCall,
    Kernel,
    LaunchConfig,
    LoopKind,
    MicroKernelCall,
    PartitionKind,
    Region,
    Seq,
    Stmt,
    Store,
    Stream,
    StreamPop,
    StreamPush,
)
from tilecraft.kernel_ir.printer import kernel_to_str, stmt_to_str

__all__ = [
    "Allocate", "ArrayPartition", "Barrier", "Buffer", "BufferLoad", "Copy", "For",
    "IfThenElse", "IntrinsicCall", "Kernel", "LaunchConfig", "LoopKind", "MicroKernelCall",
    "PartitionKind", "Region", "Seq", "Stmt", "Store", "Stream", "StreamPop", "StreamPush",
    "kernel_to_str", "stmt_to_str",
]
