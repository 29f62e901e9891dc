"""The x86 lowering strategy of contractions: cache and register blocking around the plugin's
micro-kernels (:mod:`tilecraft_x86_avx512.microkernels`, thesis §3.4.1.2), in the style of
BLIS/Goto GEMM.

The core recognises what to block (:mod:`tilecraft.passes.contraction`, group splits,
transposed convolutions as a matrix product); these modules decide how a CPU runs it, each
producing Kernel IR:

- :mod:`.register_tiles`: a contraction as packing plus blocked loops around an ``MI x NR``
  register-tile micro-kernel (:class:`~.register_tiles.Blocking`), with the operand packing
  and edge tiles the other modules reuse;
- :mod:`.block_packed`: B packed inside the parallel loop, one block of columns at a time;
- :mod:`.transposed_conv1x1`: a 1x1 convolution with few output channels as ``y^T = x^T W^T``,
  the activation read in place and the weights packed once, tiles stored transposed;
- :mod:`.direct_conv`: a KxK convolution of stride 1 or 2 without im2col, the padded
  activation read in place at each tap's shift by the ``outer_product_f32_taps`` micro-kernels,
  the weights packed once, tiles stored transposed;
- :mod:`.epilogue`, :mod:`.depthwise` and :mod:`.depthwise_epilogue`: a contraction's or a
  depthwise convolution's elementwise consumer computed in the same kernel;
- :mod:`.dot_product` and :mod:`.dot_product_packing`: int8 (VNNI) and bfloat16 contractions,
  packed with ``k`` groups innermost, with the sign compensation of ``vpdpbusd``;
- :mod:`.contraction_chain` and :mod:`.chain_rows`: a GEMM chain (GEMM -> memory-bound ops ->
  GEMM) as one kernel over blocks of rows;
- :mod:`.column_chain` and :mod:`.column_packing`: a convolution chain as one kernel over
  blocks of columns (output pixels);
- :mod:`.col2im`: the gather of a transposed convolution's scatter form, phase by phase;
- :mod:`.building`: the small helpers all of them build Kernel IR with (loop nests and kinds,
  flat indices of axis groups, te expressions as Kernel IR).

>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft.passes.contraction import as_contraction
>>> from tilecraft_x86_avx512.blocking.register_tiles import Blocking, lower_contraction
>>> C = ops.matmul(te.placeholder((5, 3), name="A"), te.placeholder((3, 4), name="B"), name="C")
>>> kernels = lower_contraction(as_contraction(C), "gemm", Blocking(mi=2, nr=4, kc=3, mc=4),
...                             LoweringOptions(vector_lanes=4))
>>> [k.name for k in kernels]
['C_bpacked_pack', 'C']
"""
