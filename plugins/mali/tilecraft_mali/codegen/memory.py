"""Where the buffers a kernel allocates live in OpenCL C, checked against the spec.

- the hierarchy's ``shared_level`` (``local``) is ``__local`` memory: one array per buffer
  declared at kernel scope (OpenCL 1.2 allows ``__local`` variables nowhere else), plus the
  scratch rows of the cross-work-item reductions (:mod:`.reduction`); all of it must fit the
  spec's ``shared_bytes_per_block`` (and, at build time, the device's ``CL_DEVICE_LOCAL_MEM_SIZE``);
- a ``registers`` level (``private``) is a work-item's private array, declared where it is
  allocated; together they must fit ``max_registers_per_thread`` 32-bit registers;
- nothing else can be allocated inside a kernel.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Allocate, Buffer, Kernel, Seq
>>> from tilecraft_mali.target import load_target_spec
>>> tile = Buffer("tile", (64, 65), DType.FLOAT32, level="local")
>>> plan = LocalMemoryPlan.of(Kernel("k", (), (), Allocate(tile, Seq(()))), load_target_spec())
>>> plan.local_bytes, [b.name for b in plan.local]
(16640, ['tile'])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.nodes import Allocate, Buffer, Kernel
from tilecraft.kernel_ir.visitor import walk_stmts
from tilecraft.target.memory import MemoryKind
from tilecraft.target.spec import TargetSpec

__all__ = ["LocalMemoryPlan", "check_local_bytes"]


def check_local_bytes(kernel_name: str, needed: int, limit: int | None, where: str) -> None:
    """A CodegenError naming the kernel, the limit and the value when ``needed`` bytes of
    ``__local`` memory exceed ``limit`` (``where`` says whose limit it is)."""
    if limit is not None and needed > limit:
        raise CodegenError(f"kernel {kernel_name}: needs {needed} bytes of __local memory per "
                           f"work-group, above the limit of {limit} bytes ({where}); use "
                           "smaller tiles or fewer work-items per work-group")


@dataclass
class LocalMemoryPlan:
    """The kernel's ``__local`` and private buffers (module docstring)."""

    local: list[Buffer] = field(default_factory=list)
    private: list[Buffer] = field(default_factory=list)

    @property
    def local_bytes(self) -> int:
        return sum(buffer.nbytes for buffer in self.local)

    def is_private(self, buffer: Buffer) -> bool:
        return any(buffer is held for held in self.private)

    def is_local(self, buffer: Buffer) -> bool:
        return any(buffer is held for held in self.local)

    @classmethod
    def of(cls, kernel: Kernel, spec: TargetSpec) -> LocalMemoryPlan:
        threads = spec.threads
        local_level = threads.shared_level if threads else None
        registers = {level.name for level in spec.memory.levels
                     if level.kind is MemoryKind.REGISTERS}
        plan = cls()
        for buffer in (s.buffer for s in walk_stmts(kernel.body) if isinstance(s, Allocate)):
            if buffer.layout != "row_major" or buffer.lanes != 1 or buffer.partitions:
                raise CodegenError(
                    f"kernel {kernel.name}: buffer {buffer.name} ({buffer.element_type}, "
                    f"layout {buffer.layout}, partitions {list(buffer.partitions)}); the OpenCL "
                    "C code generator allocates row-major scalar buffers only")
            if buffer.level == local_level:
                plan.local.append(buffer)
            elif buffer.level in registers:
                plan.private.append(buffer)
            else:
                raise CodegenError(
                    f"kernel {kernel.name}: buffer {buffer.name} is allocated in memory level "
                    f"{buffer.level!r}; an OpenCL kernel allocates in {local_level!r} "
                    f"(__local) or {', '.join(sorted(registers))} (private) only — pass a "
                    "global buffer as a kernel parameter")
        words = sum(-(-buffer.nbytes // 4) for buffer in plan.private)
        most = threads.max_registers_per_thread if threads else None
        if most is not None and words > most:
            raise CodegenError(
                f"kernel {kernel.name}: the private buffers "
                f"({', '.join(b.name for b in plan.private)}) need {words} 32-bit registers "
                f"per work-item, above max_registers_per_thread {most}; use smaller register "
                "tiles or stage data in __local memory")
        return plan
