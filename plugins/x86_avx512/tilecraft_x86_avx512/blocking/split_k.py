"""A contraction whose reduction is split across the threads: each thread sums its own run of
``K`` into a partial product, then the partials are added (with the epilogue) in parallel.

The template's other paths split C's rows or columns between the threads, so every thread
reads all of ``K``. Where B's rows (a 1x1 convolution's input channels) were written split
between the threads — a depthwise convolution on a small map runs in parallel over its
channels (:func:`~.depthwise.row_chunks` gives it one band), and so does the 1x1 expansion
before it (its rows of C are those channels) — each thread reads the half of B the other one
wrote out of that core's cache. MobileNet-V2's projections read 4-6x more B than they write
C (``K`` = 6 ``M``): here each thread reads only the channels it wrote, and the threads
exchange the partials (``M x N``) instead of B (``K x N``). Two kernels:

1. ``<C>_kpartial`` — parallel over the ``T`` threads' runs of ``K`` (``K / T`` each, in the
   order the runtime hands a parallel loop's chunks out, :func:`~..runtime.split_range`): the
   ``outer_product_f32_rows`` micro-kernel over every tile of C with that run of the
   reduction (A and B read in place, ``KC`` slices inside the run), into the workspace
   ``<C>_kpartials[T, M, N]``;
2. ``<C>`` (or the fused elementwise consumer's name) — parallel over C's rows: the sum of the
   ``T`` partials, through the epilogue's expression where there is one (same-index mode of
   :class:`~.epilogue.Epilogue`), vectorised along the row.

Where it applies (:func:`prefers_split_k`): several threads, batch 1, float32, A and B
row-major views (A read in place; B a channels-first 1x1 convolution's input ``x[0, k, h,
w]``), ``K`` a multiple of the threads with at least :data:`MIN_RUN` per thread and at least
:data:`MIN_K_OVER_M` times ``M``, and a map too small for the depthwise kernel's row bands
(:func:`~.depthwise.row_chunks`), so that B's channels were split between the threads
upstream. A matmul (an FFN's down projection, ``K`` = 4 ``M``) keeps its row split: its B is
no channel-split activation. ``SPLIT_K = False`` turns the default off; the template's
search space has the switch ``SPLIT_K`` wherever :func:`splittable` holds (a matmul with a
long reduction too), so a tuned config can take the path or leave it.

MobileNet-V2, 2 threads, Xeon family 6 model 207 (Emerald Rapids), the two executables' calls
alternating in one process, 300 calls: its 17 projections 1347 -> 1208 us (sum of kernel
medians; 14 take the path: s5b2's, 14x14, 119 -> 102 us, s6b2's, 7x7, 80 -> 74), the call
4.10 -> 4.00 ms.

>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft.passes.contraction import as_contraction
>>> x = te.placeholder((1, 96, 5, 7), name="x")
>>> w = te.placeholder((16, 96, 1, 1), name="w")
>>> c = as_contraction(ops.conv2d(x, w, name="y"), broadcast_batch=True)
>>> kernels = lower_split_k(c, LoweringOptions(vector_lanes=16), 2, mi=4, nr=32, kc=48)
>>> [k.name for k in kernels], kernels[0].outputs
(['y_kpartial', 'y'], ('y_kpartials',))
>>> kernels[0].attrs["schedule"].split(": ")[-1].split(" > ")
['parallel(2 runs of 48)', 'k-slices(1)', 'panels(2)', 'strips(4)']
"""

from __future__ import annotations

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import (
    Buffer,
    BufferLoad,
    IfThenElse,
    Kernel,
    LoopKind,
    Region,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import Contraction
from tilecraft.te.expr import Binary, BinaryOp, Expr, Var, const
from tilecraft.te.functions import eq
from tilecraft_x86_avx512.blocking.building import (
    ceil_div,
    nest,
    parallel_kind,
    unique_params,
    vector_kind,
)
from tilecraft_x86_avx512.blocking.depthwise import row_chunks
from tilecraft_x86_avx512.blocking.epilogue import Epilogue
from tilecraft_x86_avx512.blocking.register_tiles import a_row_view, b_row_view, edge_tiles
from tilecraft_x86_avx512.microkernels import OUTER_PRODUCT_F32_ROWS

#: switch for the default (kept for same-process A/B measurements)
SPLIT_K = True
#: the shortest run of the reduction a thread sums on its own
MIN_RUN = 64
#: how many times ``M`` the reduction must be: the partials the threads exchange (``M x N``)
#: must be much smaller than the part of B each would otherwise read from another core
MIN_K_OVER_M = 3


def splittable(contraction: Contraction, threads: int) -> bool:
    """Whether :func:`lower_split_k` can lower ``contraction`` on ``threads`` threads: batch
    1, float32, A and B row-major views, ``K`` a multiple of the threads (what the tuner may
    choose with ``SPLIT_K=1``).

    >>> from tilecraft import ops, te
    >>> from tilecraft.passes.contraction import as_contraction
    >>> c = as_contraction(ops.matmul(te.placeholder((48, 1024), name="A"),
    ...                               te.placeholder((1024, 40), name="B")))
    >>> splittable(c, 2), splittable(c, 3), splittable(c, 1)
    (True, False, False)
    """
    c = contraction
    batch, _, _, k_total = c.extents()
    if threads < 2 or batch != 1 or c.tensor.dtype is not DType.FLOAT32 or k_total % threads:
        return False
    return a_row_view(c, const(0), Var("m0"), Var("k0"), "param") is not None \
        and b_row_view(c, const(0), Var("k0"), Var("n0"), "param") is not None


def prefers_split_k(contraction: Contraction, threads: int) -> bool:
    """Whether :func:`lower_split_k` is the default for ``contraction`` on ``threads``
    threads (see the module docstring).

    >>> from tilecraft import ops, te
    >>> from tilecraft.passes.contraction import as_contraction
    >>> def conv(k, m, side):
    ...     return as_contraction(ops.conv2d(te.placeholder((1, k, side, side), name="x"),
    ...                           te.placeholder((m, k, 1, 1), name="w")), broadcast_batch=True)
    >>> prefers_split_k(conv(576, 96, 14), 2), prefers_split_k(conv(576, 96, 14), 1)
    (True, False)
    >>> prefers_split_k(conv(144, 24, 56), 2)   # row bands upstream: split the pixels
    False
    """
    c = contraction
    _, m_total, _, k_total = c.extents()
    if not splittable(c, threads) or k_total // threads < MIN_RUN \
            or k_total < MIN_K_OVER_M * m_total:
        return False
    activation = c.b.tensor.shape   # a channels-first convolution's input: (1, K, H, W)
    return len(activation) == 4 and row_chunks(activation[2], threads)[1] == 1


def lower_split_k(contraction: Contraction, options: LoweringOptions, threads: int, mi: int,
                  nr: int, kc: int, epilogue: Epilogue | None = None) -> list[Kernel]:
    """The two kernels of ``contraction`` with its reduction split into ``threads`` runs (see
    the module docstring): register tile ``mi x nr``, slices of at most ``kc`` inside a run;
    ``epilogue`` (same-index mode) computed by the second kernel."""
    c = contraction
    tensor = c.tensor
    _, m_total, n_total, k_total = c.extents()
    dtype = tensor.dtype
    level = options.param_level
    run = k_total // threads
    k_blocks = ceil_div(run, min(kc, run))
    kc = ceil_div(run, k_blocks)
    k_last = run - (k_blocks - 1) * kc
    nb, strips = ceil_div(n_total, nr), ceil_div(m_total, mi)
    t, pc, jr, ir = Var("t"), Var("pc"), Var("jr"), Var("is")
    m0, n0, k0 = ir * mi, jr * nr, t * run + pc * kc
    a_view, a_base = a_row_view(c, const(0), m0, k0, level)
    b_view, b_base = b_row_view(c, const(0), k0, n0, level)
    partials = Buffer(f"{tensor.name}_kpartials", (threads, m_total, n_total), dtype,
                      level=level)

    def tiles(ki: int) -> Stmt:
        a_region = Region(a_view, a_base, (*(1,) * (len(a_base) - 2), mi, ki))
        b_region = Region(b_view, b_base, (*(1,) * (len(b_base) - 2), ki, nr))
        return edge_tiles(OUTER_PRODUCT_F32_ROWS.name, a_region, b_region, partials, t, m0, n0,
                          m_total, n_total, mi, nr, (("MI", mi), ("NR", nr), ("KI", ki)),
                          eq(pc, 0), options, a_rows_dim=-2)

    body = tiles(kc) if k_last == kc else \
        IfThenElse(pc < k_blocks - 1, tiles(kc), tiles(k_last))
    body = nest([(t, threads, parallel_kind(options, threads), 0),
                 (pc, k_blocks, LoopKind.SERIAL, 0), (jr, nb, LoopKind.SERIAL, 0),
                 (ir, strips, LoopKind.SERIAL, 0)], body)
    schedule = (f"split-K: micro-kernel {OUTER_PRODUCT_F32_ROWS.name} MI={mi} NR={nr} KC={kc}: "
                f"parallel({threads} runs of {run}) > k-slices({k_blocks}) > panels({nb}) > "
                f"strips({strips})")
    partial_kernel = Kernel(f"{tensor.name}_kpartial",
                            tuple(unique_params([a_view, b_view, partials])), (partials.name,),
                            body, attrs={"compute": tensor.name, "statement": tensor.statement(),
                                         "schedule": schedule,
                                         "micro_kernel": OUTER_PRODUCT_F32_ROWS.name})
    # tiles stay in bounds by the edge conditions around them (see contraction_kernel)
    verify_kernel(partial_kernel, options.spec, check_bounds=False)
    return [partial_kernel, _sum_kernel(c, partials, options, epilogue)]


def _sum_kernel(contraction: Contraction, partials: Buffer, options: LoweringOptions,
                epilogue: Epilogue | None) -> Kernel:
    """``C`` (or the epilogue's consumer) as the sum of the partials, in parallel over rows."""
    tensor = contraction.tensor
    threads, m_total, n_total = partials.shape
    m, n = Var("m"), Var("n")
    total: Expr = BufferLoad(partials, (const(0), m, n))
    for t in range(1, threads):
        total = Binary(BinaryOp.ADD, total, BufferLoad(partials, (const(t), m, n)))
    if epilogue is None:
        out = Buffer(tensor.name, (1, m_total, n_total), tensor.dtype, level=options.param_level)
        store: Stmt = Store(out, (const(0), m, n), total)
        name, operands, fused = tensor.name, [], [tensor.name]
    else:
        out = epilogue.out
        store = epilogue.store_value(const(0), m, n, total)
        name, operands = epilogue.consumer.name, list(epilogue.operands.values())
        fused = [tensor.name, name]
    lanes = max(1, options.lanes(tensor.dtype))
    body = nest([(m, m_total, parallel_kind(options, m_total), 0),
                 (n, n_total, vector_kind(options), lanes)], store)
    kernel = Kernel(name, tuple(unique_params([partials, *operands, out])), (name,), body,
                    attrs={"compute": name, "fused": fused,
                           "statement": (tensor if epilogue is None
                                         else epilogue.consumer).statement(),
                           "schedule": f"sum of {threads} split-K partials: parallel({m_total} "
                                       f"rows) > vector(n={n_total}, lanes={lanes})"})
    verify_kernel(kernel, options.spec)
    return kernel
