"""The launch configuration of a kernel, read from its bound loops: the core's
:mod:`tilecraft.codegen.launch` (grid and block from the spec's thread hierarchy).

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Buffer, For, Kernel, LoopKind, Store
>>> from tilecraft.te import Var, const
>>> from tilecraft_nvidia_tc.target import load_target_spec
>>> A = Buffer("A", (600,), DType.FLOAT32)
>>> b, t = Var("b"), Var("t")
>>> body = For(b, const(3), LoopKind.BOUND, For(t, const(200), LoopKind.BOUND,
...            Store(A, (b * 200 + t,), const(0.0)), axis="threadIdx.x"), axis="blockIdx.x")
>>> launch = launch_config(Kernel("zero", (A,), ("A",), body), load_target_spec().threads)
>>> launch.grid, launch.block, launch.threads_per_block
((3, 1, 1), (200, 1, 1), 200)
"""

from tilecraft.codegen.launch import Launch, bound_extent, launch_config

__all__ = ["Launch", "bound_extent", "launch_config"]
