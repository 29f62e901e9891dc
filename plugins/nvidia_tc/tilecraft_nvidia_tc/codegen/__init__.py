"""The CUDA C code generator of the nvidia_tc target: Kernel IR to one ``.cu`` translation unit
per kernel, through the Jinja templates in ``tilecraft_nvidia_tc/templates``.

One concern per module: :mod:`.dtypes` (C types and conversions), :mod:`.expressions`,
:mod:`.affine` (what is proven about an access), :mod:`.launch` (grid and block from the
bound loops), :mod:`.memory` (registers, static and dynamic shared memory),
:mod:`.statements`, :mod:`.vector` (``float4``), :mod:`.kernel` (the unit and its metadata).
"""

from tilecraft_nvidia_tc.codegen.kernel import DEFAULT_ARCH, generate_cuda

__all__ = ["DEFAULT_ARCH", "generate_cuda"]
