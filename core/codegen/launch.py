"""The launch configuration of a GPU kernel (CUDA grid and block, OpenCL work-groups and
work-items), read from its bound loops.

Each loop bound to a hardware axis (``blockIdx.x``, ``threadIdx.y`` ...) runs its variable over
that axis' index; the launched extent of an axis is the largest extent of the loops bound to
it, and a loop with a smaller extent gets a guard. Grid and block dimensions come from the
axes' ``dim`` in the spec's :class:`~tilecraft.target.hierarchy.ThreadHierarchy`, and are
checked against its limits.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Buffer, For, Kernel, LoopKind, Store
>>> from tilecraft.te import Var, const
>>> from tilecraft.target.hierarchy import ThreadHierarchy
>>> threads = ThreadHierarchy(axes=[
...     {"name": "blockIdx.x", "scope": "grid", "dim": 0, "max_extent": 65535},
...     {"name": "threadIdx.x", "scope": "block", "dim": 0, "max_extent": 1024}],
...     max_threads_per_block=1024, subgroup_size=32)
>>> A = Buffer("A", (600,), DType.FLOAT32)
>>> b, t = Var("b"), Var("t")
>>> body = For(b, const(3), LoopKind.BOUND, For(t, const(200), LoopKind.BOUND,
...            Store(A, (b * 200 + t,), const(0.0)), axis="threadIdx.x"), axis="blockIdx.x")
>>> launch = launch_config(Kernel("zero", (A,), ("A",), body), threads)
>>> launch.grid, launch.block, launch.threads_per_block
((3, 1, 1), (200, 1, 1), 200)
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.nodes import For, Kernel, LoopKind
from tilecraft.kernel_ir.visitor import walk_stmts
from tilecraft.target.hierarchy import LaunchScope, ThreadHierarchy
from tilecraft.te.expr import Const

__all__ = ["Launch", "bound_extent", "launch_config"]


@dataclass(frozen=True)
class Launch:
    """Grid and block dimensions (x, y, z) and the launched extent of every bound axis."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    extents: dict[str, int]
    scopes: dict[str, LaunchScope]

    @property
    def threads_per_block(self) -> int:
        x, y, z = self.block
        return x * y * z


def bound_extent(loop: For, kernel: Kernel) -> int:
    """The constant extent of a bound loop (a CodegenError otherwise)."""
    if not isinstance(loop.extent, Const):
        raise CodegenError(f"kernel {kernel.name}: the loop over {loop.var.name} bound to "
                           f"{loop.axis} has the extent {loop.extent}, not a constant; the "
                           "launch configuration needs constant extents")
    return int(loop.extent.value)


def launch_config(kernel: Kernel, threads: ThreadHierarchy | None,
                  language: str = "CUDA") -> Launch:
    """The launch of ``kernel`` (module docstring); a CodegenError names the kernel, the axis
    or limit and the value when a bound loop does not fit the hierarchy (``language`` names
    the kind of launch in the message)."""
    extents: dict[str, int] = {}
    bound = [s for s in walk_stmts(kernel.body) if isinstance(s, For) and s.kind is LoopKind.BOUND]
    if bound and threads is None:
        raise CodegenError(f"kernel {kernel.name}: loops are bound to hardware axes but the "
                           "spec declares no thread hierarchy")
    scopes: dict[str, LaunchScope] = {}
    grid, block = [1, 1, 1], [1, 1, 1]
    for loop in bound:
        if loop.axis is None or loop.axis not in threads.axis_names:
            known = ", ".join(threads.axis_names)
            raise CodegenError(f"kernel {kernel.name}: the loop over {loop.var.name} is bound to "
                               f"{loop.axis!r}, which is not an axis of the spec; bind it to one "
                               f"of {known}")
        extent = bound_extent(loop, kernel)
        extents[loop.axis] = max(extents.get(loop.axis, 1), extent)
    for name, extent in extents.items():
        axis = threads.axis(name)
        scopes[name] = axis.scope
        if extent > axis.max_extent:
            raise CodegenError(f"kernel {kernel.name}: {extent} iterations bound to {name} exceed "
                               f"its limit of {axis.max_extent}; split the loop further")
        if axis.dim > 2:
            raise CodegenError(f"kernel {kernel.name}: axis {name} has launch dimension "
                               f"{axis.dim}; {language} launches have x, y and z only")
        (grid if axis.scope is LaunchScope.GRID else block)[axis.dim] = extent
    launch = Launch((grid[0], grid[1], grid[2]), (block[0], block[1], block[2]), extents, scopes)
    if launch.threads_per_block > threads.max_threads_per_block if threads else False:
        raise CodegenError(f"kernel {kernel.name}: blocks of {launch.threads_per_block} threads "
                           f"{tuple(launch.block)} exceed max_threads_per_block "
                           f"{threads.max_threads_per_block}; bind fewer iterations to the "
                           "block axes")
    return launch
