"""The col2im step of a transposed convolution as one Kernel IR kernel, phase by phase.

After ``cols[g, o, r..., n, i...] = sum_c w * x`` (:mod:`tilecraft.passes.transposed_conv`), each
output element sums the ``cols`` values whose tap lands on it:
``y[n, g*Og + o, Y...] = sum_r cols[g, o, r..., n, (Y + p - r*d) / s...]`` over exact, in-range
divisions. Written as a te gather, a vector loop along the output's last axis ``X`` reads
``(X + p - r*d) // s``: lanes at half speed (stride 2) — a gather per tap. Splitting the output
positions by phase, ``X = s*q + ph``, makes it regular: for a given phase only the taps with
``(ph + p - r*d) % s == 0`` contribute (known when the kernel is built, so the others are never
visited), and they read ``cols[..., q + c]`` with a constant ``c = (ph + p - r*d) // s`` —
contiguous along ``q``. For every output row and phase the kernel sums the phase's taps into a
local row ``acc[q]`` with contiguous vector loads, then stores the row into ``y`` with stride
``s`` (one strided store per output element instead of a gather per tap).

>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft.passes.transposed_conv import as_transposed_conv
>>> y = ops.conv_transpose1d(te.placeholder((1, 2, 5), name="x"),
...                          te.placeholder((2, 3, 3), name="w"), stride=2, name="y")
>>> kernel = lower_col2im(as_transposed_conv(y), "y_cols",
...                       LoweringOptions(vector_lanes=4, parallel=False))
>>> print(*str(kernel).splitlines()[:9], sep=chr(10))
kernel y(y_cols: float32[1, 3, 3, 1, 5], y: float32[1, 3, 11]) -> (y):
  for t in serial(3):
    alloc y_acc: float32[6] in global
    for qv in vector(6, lanes=4):
      y_acc[qv] = 0.0
    for qv in vector(6, lanes=4):
      if (((qv + 0) >= 0) && ((qv + 0) < 5)):
        y_acc[qv] sum= y_cols[0, t, 0, 0, (qv + 0)]
    for qv in vector(6, lanes=4):
"""

from __future__ import annotations

import itertools

from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    Kernel,
    LoopKind,
    Seq,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.transposed_conv import TransposedConv
from tilecraft.te.expr import Expr, ReduceOp, Var, const
from tilecraft.te.functions import all_of
from tilecraft_x86_avx512.blocking.building import ceil_div


def phase_taps(phase: int, stride: int, padding: int, dilation: int,
               kernel: int) -> list[tuple[int, int]]:
    """``(tap, offset)`` of the taps landing on outputs ``s*q + phase``: those reading input
    ``q + offset``.

    >>> phase_taps(0, stride=2, padding=1, dilation=1, kernel=4)
    [(1, 0), (3, -1)]
    """
    taps = []
    for tap in range(kernel):
        shifted = phase + padding - tap * dilation
        if shifted % stride == 0:
            taps.append((tap, shifted // stride))
    return taps


def lower_col2im(conv: TransposedConv, cols_name: str, options: LoweringOptions) -> Kernel:
    """The kernel computing ``conv.tensor`` from the workspace ``cols_name`` (shape
    ``(G, Og, *kernel, N, *in)``), phase by phase (see the module docstring)."""
    tensor, x, w = conv.tensor, conv.x, conv.w
    nd = x.ndim - 2
    batch, _, *in_spatial = x.shape
    _, out_per_group, *kernel = w.shape
    out_spatial = tensor.shape[2:]
    dtype = tensor.dtype
    level = options.param_level
    cols = Buffer(cols_name, (conv.groups, out_per_group, *kernel, batch, *in_spatial), dtype,
                  level=level)
    out = Buffer(tensor.name, tensor.shape, dtype, level=level)
    quotients = [ceil_div(extent, s) for extent, s in zip(out_spatial, conv.stride)]
    acc = Buffer(f"{tensor.name}_acc", (quotients[-1],), dtype, level=level)
    lanes = max(1, options.lanes(dtype))
    vector = LoopKind.VECTOR if options.vectorize and options.allows(LoopKind.VECTOR) \
        else LoopKind.SERIAL
    channels = tensor.shape[1]
    t, qv = Var("t"), Var("qv")
    n = t // channels if batch > 1 else const(0)
    channel = t % channels if batch > 1 else t
    group = channel // out_per_group if conv.groups > 1 else const(0)
    inner = channel % out_per_group if conv.groups > 1 else channel
    rows = [Var(f"q{d}") for d in range(nd - 1)]

    def vector_loop(body: Stmt) -> For:
        return For(qv, const(quotients[-1]), vector, body, lanes=lanes)

    per_dim = [[(ph, phase_taps(ph, conv.stride[d], conv.padding[d], conv.dilation[d],
                                kernel[d])) for ph in range(conv.stride[d])] for d in range(nd)]
    phases: list[Stmt] = []
    for combo in itertools.product(*per_dim):
        parts: list[Stmt] = [vector_loop(Store(acc, (qv,), const(0.0, dtype)))]
        for taps in itertools.product(*(entry[1] for entry in combo)):
            lead = [rows[d] + off for d, (_, off) in enumerate(taps[:-1])]
            last = qv + taps[-1][1]
            index = (group, inner, *(const(tap) for tap, _ in taps), n, *lead, last)
            inside: list[Expr] = [last >= 0, last < in_spatial[-1]]
            add = vector_loop(IfThenElse(all_of(*inside), Store(
                acc, (qv,), BufferLoad(cols, index), accumulate=ReduceOp.SUM)))
            lead_inside = [c for d, e in enumerate(lead) for c in (e >= 0, e < in_spatial[d])]
            parts.append(IfThenElse(all_of(*lead_inside), add) if lead_inside else add)
        phase_x = combo[-1][0]
        x_out = qv * conv.stride[-1] + phase_x
        ys = [rows[d] * conv.stride[d] + combo[d][0] for d in range(nd - 1)]
        parts.append(vector_loop(IfThenElse(x_out < out_spatial[-1], Store(
            out, (n, channel, *ys, x_out), BufferLoad(acc, (qv,))))))
        body: Stmt = Seq(tuple(parts))
        rows_inside = [y < out_spatial[d] for d, y in enumerate(ys)
                       if out_spatial[d] % conv.stride[d]]
        phases.append(IfThenElse(all_of(*rows_inside), body) if rows_inside else body)
    body = Seq(tuple(phases))
    for d in reversed(range(nd - 1)):
        body = For(rows[d], const(quotients[d]), LoopKind.SERIAL, body)
    outer = batch * channels
    parallel = (LoopKind.PARALLEL if options.parallel and options.allows(LoopKind.PARALLEL)
                and outer > 1 else LoopKind.SERIAL)
    kernel_ir = Kernel(tensor.name, (cols, out), (tensor.name,),
                       For(t, const(outer), parallel, Allocate(acc, body)),
                       attrs={"compute": tensor.name, "statement": tensor.statement(),
                              "schedule": f"col2im by phase: parallel({outer}) > rows > "
                                          f"{len(phases)} phases > taps > vector(q)"})
    # loads and stores are guarded by the conditions around them, which the verifier's
    # interval analysis does not use; the interpreter checks every access instead
    verify_kernel(kernel_ir, options.spec, check_bounds=False)
    return kernel_ir


__all__ = ["lower_col2im", "phase_taps"]
