"""Where each buffer a kernel allocates lives in CUDA C, checked against the spec's limits.

- a buffer in a ``registers`` level (the spec's ``fragment``) is a per-thread local array
  declared where it is allocated, or a WMMA fragment (:mod:`.wmma`: its tile spread over the
  lanes of a warp); all of them together must fit ``max_registers_per_thread``;
- a buffer in the hierarchy's ``shared_level`` is block-shared memory, declared once at the top
  of the kernel (a ``__shared__`` array of static size); when they add up to more than
  ``shared_bytes_per_block`` (48 KB on sm_80) they move into the dynamic shared allocation
  ``tc_dynamic_smem`` instead (the launch sets the size and opts in), up to
  ``shared_bytes_per_block_optin``;
- nothing else can be allocated inside a kernel: a CodegenError names the buffer and level.

Every array is 16-byte aligned so that 128-bit (``float4``) accesses on it are legal.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Allocate, Buffer, Kernel, Seq
>>> from tilecraft_nvidia_tc.target import load_target_spec
>>> tile = Buffer("tile", (64, 65), DType.FLOAT32, level="shared")
>>> plan = plan_memory(Kernel("k", (), (), Allocate(tile, Seq(()))), load_target_spec())
>>> plan.shared_bytes, plan.dynamic
(16640, False)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.nodes import Allocate, Buffer, Copy, Kernel
from tilecraft.kernel_ir.visitor import walk_stmts
from tilecraft.target.memory import MemoryKind
from tilecraft.target.spec import TargetSpec
from tilecraft_nvidia_tc.codegen.wmma import Fragment, find_fragments

__all__ = ["MemoryPlan", "plan_memory"]

ALIGNMENT = 16


def _aligned(offset: int) -> int:
    return -(-offset // ALIGNMENT) * ALIGNMENT


@dataclass
class MemoryPlan:
    """The kernel's allocations: register buffers, shared buffers with their byte offsets in
    the dynamic allocation (when ``dynamic``)."""

    registers: list[Buffer] = field(default_factory=list)
    shared: list[Buffer] = field(default_factory=list)
    shared_offsets: dict[int, int] = field(default_factory=dict)
    shared_bytes: int = 0
    dynamic: bool = False
    #: id(buffer) -> its WMMA fragment, for the register buffers that are fragments
    fragments: dict[int, Fragment] = field(default_factory=dict)
    #: ids of the buffers WMMA loads fragments from or stores them into (32-byte aligned)
    fragment_memory: set[int] = field(default_factory=set)

    @property
    def dynamic_shared_bytes(self) -> int:
        return self.shared_bytes if self.dynamic else 0

    def is_register(self, buffer: Buffer) -> bool:
        return any(buffer is b for b in self.registers)

    def is_shared(self, buffer: Buffer) -> bool:
        return any(buffer is b for b in self.shared)


def plan_memory(kernel: Kernel, spec: TargetSpec) -> MemoryPlan:
    """Classify and check every allocation of ``kernel`` (module docstring)."""
    threads = spec.threads
    kinds = {level.name: level.kind for level in spec.memory.levels}
    shared_level = threads.shared_level if threads else None
    plan = MemoryPlan(fragments=find_fragments(kernel, spec))
    for stmt in walk_stmts(kernel.body):
        if isinstance(stmt, Copy) and (id(stmt.src.buffer) in plan.fragments
                                       or id(stmt.dst.buffer) in plan.fragments):
            plan.fragment_memory.update((id(stmt.src.buffer), id(stmt.dst.buffer)))
    for stmt in walk_stmts(kernel.body):
        if not isinstance(stmt, Allocate):
            continue
        buffer = stmt.buffer
        if buffer.layout != "row_major" or buffer.lanes != 1 or buffer.partitions:
            raise CodegenError(
                f"kernel {kernel.name}: buffer {buffer.name} has element type "
                f"{buffer.element_type}, layout {buffer.layout} and partitions "
                f"{list(buffer.partitions)}; the CUDA code generator allocates row-major "
                "scalar buffers only")
        if buffer.level == shared_level:
            plan.shared_offsets[id(buffer)] = plan.shared_bytes
            plan.shared.append(buffer)
            plan.shared_bytes = _aligned(plan.shared_bytes + buffer.nbytes)
        elif kinds.get(buffer.level) is MemoryKind.REGISTERS:
            plan.registers.append(buffer)
        else:
            raise CodegenError(
                f"kernel {kernel.name}: buffer {buffer.name} is allocated in memory level "
                f"{buffer.level!r}; a CUDA kernel allocates only in {shared_level!r} (shared) "
                "or a registers level — pass a global buffer as a kernel parameter")
    _check_registers(kernel, spec, plan)
    _check_shared(kernel, spec, plan)
    return plan


def _check_registers(kernel: Kernel, spec: TargetSpec, plan: MemoryPlan) -> None:
    limit = spec.threads.max_registers_per_thread if spec.threads else None
    lanes = spec.threads.subgroup_size if spec.threads else 32
    # a fragment's tile is spread over the lanes of a warp
    words = sum(-(-buffer.nbytes // (4 * (lanes if id(buffer) in plan.fragments else 1)))
                for buffer in plan.registers)
    if limit is not None and words > limit:
        names = ", ".join(buffer.name for buffer in plan.registers)
        raise CodegenError(
            f"kernel {kernel.name}: the register buffers ({names}) need {words} 32-bit "
            f"registers per thread, above max_registers_per_thread {limit}; use smaller "
            "register tiles or stage data in shared memory")


def _check_shared(kernel: Kernel, spec: TargetSpec, plan: MemoryPlan) -> None:
    threads = spec.threads
    static = threads.shared_bytes_per_block if threads else None
    most = threads.max_shared_bytes_per_block if threads else None
    if static is None or plan.shared_bytes <= static:
        return
    if most is None or plan.shared_bytes > most:
        names = ", ".join(buffer.name for buffer in plan.shared)
        raise CodegenError(
            f"kernel {kernel.name}: the shared buffers ({names}) need {plan.shared_bytes} bytes "
            f"per block, above the limit of {most if most is not None else static} bytes "
            "(shared_bytes_per_block_optin); use smaller tiles")
    plan.dynamic = True
