"""Kernel IR: loops with kinds, buffers in memory levels, statements (see :mod:`.nodes`), the
statements of concurrent hardware (:mod:`.concurrency`), layouts (:mod:`.layout`) and one
visitor for every consumer (:mod:`.visitor`)."""

from tilecraft.kernel_ir.concurrency import (
    AsyncCopy,
    AtomicUpdate,
    CommitGroup,
    Dataflow,
    LaneReduce,
    Pipeline,
    SubgroupReduce,
    WaitGroup,
)
from tilecraft.kernel_ir.layout import Blocked, Layout, RowMajor, Strided, parse_layout
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
from tilecraft.kernel_ir.visitor import KernelTransformer, KernelVisitor, stmt_children, walk_stmts

__all__ = [
    "Allocate", "ArrayPartition", "AsyncCopy", "AtomicUpdate", "Barrier", "Blocked", "Buffer",
    "BufferLoad", "CommitGroup", "Copy", "Dataflow", "For", "IfThenElse", "IntrinsicCall",
    "Kernel", "KernelTransformer", "KernelVisitor", "LaneReduce", "LaunchConfig", "Layout",
    "LoopKind", "MicroKernelCall", "PartitionKind", "Pipeline", "Region", "RowMajor", "Seq",
    "Stmt", "Store", "Strided", "Stream", "StreamPop", "StreamPush", "SubgroupReduce",
    "WaitGroup", "kernel_to_str", "parse_layout", "stmt_children", "stmt_to_str", "walk_stmts",
]
