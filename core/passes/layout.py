"""Layout choice: convolutions rewritten into the layout the target prefers.

A target whose kernels run best on channels-last data says so in its spec
(``preferred_layouts: {conv2d: NHWC}``, :class:`tilecraft.target.spec.TargetSpec`). This pass
then rewrites every NCHW ``conv2d`` compute (a 4-d sum of products of ``x[n, ...]`` and
``w[k, ...]``, as :func:`tilecraft.ops.conv2d` builds it) into NHWC with HWIO weights:

- the conv itself becomes ``<name>_nhwc[n, h, w, k]`` over the same body, its input read
  through ``<x>_nhwc = transpose(x, (0, 2, 3, 1))`` and its weights through
  ``<w>_hwio = transpose(w, (2, 3, 1, 0))`` (constant weights: folded by ``fold_constants``);
- the old name stays, as the transpose back ``y[n, k, h, w] = y_nhwc[n, h, w, k]``;
- that transpose is then sunk through the computes of the same rank that read it — elementwise
  ones (relu, a bias or residual add, the next conv's padding) and reductions that are no sum
  of products (a max or average pool, a global average pool) — which are rebuilt in NHWC with
  the transpose after them, so that between two convolutions the transpose back meets the
  next convolution's transpose in and ``simplify`` cancels them, and a pool reduces whole
  vectors of channels.

A chain conv -> relu -> conv thus keeps one transpose at the graph's input and one at its
output. A graph whose grouped or depthwise convolutions prefer NCHW
(``preferred_layouts: {grouped_conv2d: NCHW}``, :func:`conv_kind`) is left as written: mixed,
it would pay a transpose at every boundary between the two kinds; so is a graph of fewer
convolutions than the spec's ``layout_min_convolutions``. A convolution whose output has fewer
pixels than the spec's ``layout_min_pixels`` keeps NCHW inside a rewritten graph (transposes
around it, where its neighbours are NHWC). The relabelling is exact for any compute (only the
storage order of values changes), so the reference agrees before and after. Without the spec
field (or without a spec) the graph is returned unchanged.

>>> from tilecraft import te, ops
>>> from tilecraft.graph import Graph
>>> from tilecraft.target.spec import TargetSpec
>>> x = te.placeholder((1, 3, 6, 6), name="x")
>>> w = te.placeholder((4, 3, 3, 3), name="w")
>>> y = ops.conv2d(x, w, name="y")
>>> class Spec:
...     preferred_layouts = {"conv2d": "NHWC"}
>>> after = choose_layout(Graph.from_outputs([y]), Spec())
>>> [t.name for t in after.computes]
['x_nhwc', 'w_hwio', 'y_nhwc', 'y']
>>> print(after.tensor("y").statement())
y[n, k, h, w] = y_nhwc[n, h, w, k]
"""

from __future__ import annotations

from typing import Any

from tilecraft.graph import Graph
from tilecraft.ops.layout import transpose
from tilecraft.passes.constant_folding import fold_constants
from tilecraft.passes.rewriting import relink, with_body
from tilecraft.passes.simplify import simplify
from tilecraft.te.expr import Binary, BinaryOp, Cast, Expr, Load, Reduce, ReduceOp
from tilecraft.te.tensor import ComputeOp, Tensor
from tilecraft.te.visit import loads_in, transform

#: NCHW -> NHWC: dimension ``d`` of the NHWC tensor is dimension ``NHWC[d]`` of the NCHW one
NHWC = (0, 2, 3, 1)
#: OIHW -> HWIO
HWIO = (2, 3, 1, 0)


def _strip_casts(expr: Expr) -> Expr:
    while isinstance(expr, Cast):
        expr = expr.x
    return expr


def conv2d_operands(tensor: Tensor) -> tuple[Load, Load] | None:
    """``(input load, weight load)`` of an NCHW conv2d compute: 4-d, one sum over the product
    of ``x[n, ...]`` and ``w[k, ...]`` (both 4-d); ``None`` for anything else.

    >>> from tilecraft import te, ops
    >>> y = ops.conv2d(te.placeholder((1, 2, 5, 5), name="x"),
    ...                te.placeholder((3, 2, 3, 3), name="w"), name="y")
    >>> [load.tensor.name for load in conv2d_operands(y)]
    ['x', 'w']
    """
    if not isinstance(tensor.op, ComputeOp) or tensor.ndim != 4:
        return None
    body = tensor.op.body
    if not isinstance(body, Reduce) or body.op is not ReduceOp.SUM:
        return None
    product = _strip_casts(body.body)
    if not isinstance(product, Binary) or product.op is not BinaryOp.MUL:
        return None
    a, b = _strip_casts(product.a), _strip_casts(product.b)
    if not (isinstance(a, Load) and isinstance(b, Load)):
        return None
    if a.tensor.ndim != 4 or b.tensor.ndim != 4:
        return None
    n, k = tensor.axes[0], tensor.axes[1]
    if a.indices[0] is n and b.indices[0] is k:
        return a, b
    if b.indices[0] is n and a.indices[0] is k:
        return b, a
    return None


def is_product_reduction(tensor: Tensor) -> bool:
    """Whether ``tensor`` sums products of two loads (a contraction: a matmul, a convolution
    the pass did not rewrite), which :func:`choose_layout` does not relabel; a pool's max or
    sum of one value is no such reduction.

    >>> from tilecraft import te, ops
    >>> x = te.placeholder((1, 2, 6, 6), name="x")
    >>> pooled = ops.max_pool2d(x, 2, name="p")
    >>> is_product_reduction(pooled), is_product_reduction(ops.conv2d(x, x, name="c"))
    (False, True)
    """
    if not isinstance(tensor.op, ComputeOp) or not isinstance(tensor.op.body, Reduce):
        return False
    body = _strip_casts(tensor.op.body.body)
    return isinstance(body, Binary) and body.op is BinaryOp.MUL and \
        isinstance(_strip_casts(body.a), Load) and isinstance(_strip_casts(body.b), Load)


def conv_kind(tensor: Tensor) -> str | None:
    """``conv2d`` for an NCHW convolution reducing over all its input channels,
    ``grouped_conv2d`` for a grouped or depthwise one (its input channel depends on the output
    channel), ``None`` for no convolution: the keys of a spec's ``preferred_layouts``.

    >>> from tilecraft import te, ops
    >>> x = te.placeholder((1, 4, 6, 6), name="x")
    >>> dense = ops.conv2d(x, te.placeholder((8, 4, 3, 3), name="w"), name="c")
    >>> depthwise = ops.conv2d(x, te.placeholder((4, 1, 3, 3), name="d"), groups=4, name="dw")
    >>> conv_kind(dense), conv_kind(depthwise), conv_kind(x)
    ('conv2d', 'grouped_conv2d', None)
    """
    operands = conv2d_operands(tensor)
    if operands is None:
        return None
    channel = operands[0].indices[1]
    reduced = isinstance(tensor.op, ComputeOp) and isinstance(tensor.op.body, Reduce) and \
        any(channel is axis for axis in tensor.op.body.axes)
    return "conv2d" if reduced else "grouped_conv2d"


def _fresh(name: str, taken: set[str]) -> str:
    """``name``, or ``name_1``, ``name_2``, ... the first not in ``taken`` (then taken)."""
    candidate, count = name, 0
    while candidate in taken:
        count += 1
        candidate = f"{name}_{count}"
    taken.add(candidate)
    return candidate


def _permuted(indices: tuple[Expr, ...], perm: tuple[int, ...]) -> tuple[Expr, ...]:
    return tuple(indices[p] for p in perm)


def _relabelled(tensor: Tensor, perm: tuple[int, ...], body: Expr, name: str) -> Tensor:
    """``tensor``'s computation stored with its dimensions in the order ``perm``."""
    assert isinstance(tensor.op, ComputeOp)
    axes = tuple(tensor.op.axes[p] for p in perm)
    shape = tuple(tensor.shape[p] for p in perm)
    return Tensor(name, shape, tensor.dtype, ComputeOp(axes, body))


def _gather_back(tensor: Tensor, stored: Tensor, perm: tuple[int, ...]) -> Tensor:
    """``tensor[axes] = stored[axes permuted by perm]``, under ``tensor``'s name."""
    assert isinstance(tensor.op, ComputeOp)
    return with_body(tensor, Load(stored, _permuted(tensor.op.axes, perm)))


class ChooseLayout:
    """The pass: ``choose_layout(graph, spec)``; it reads ``spec.preferred_layouts``."""

    name = "choose_layout"
    #: the graph-passes stage hands this pass the target's spec
    uses_spec = True

    def __call__(self, graph: Graph, spec: Any = None) -> Graph:
        preferred = dict(getattr(spec, "preferred_layouts", None) or {})
        if preferred.get("conv2d", "NCHW") != "NHWC":
            return graph
        # a graph of both kinds stays as written: mixing them would pay a transpose at each
        # boundary between the two (MobileNet's depthwise convolutions between pointwise ones)
        kinds = [kind for kind in map(conv_kind, graph.computes) if kind is not None]
        if any(preferred.get(kind, preferred["conv2d"]) != "NHWC" for kind in kinds):
            return graph
        if len(kinds) < getattr(spec, "layout_min_convolutions", 1):
            return graph   # the boundary's transposes would cost more than the layout saves
        taken = {tensor.name for tensor in graph.topological_order()}
        rewritten, gathers = self._convs_to_nhwc(graph, taken,
                                                 getattr(spec, "layout_min_pixels", 0))
        if rewritten is graph:
            return graph
        rewritten = self._sink(rewritten, gathers, taken)
        return fold_constants(simplify(rewritten))

    @staticmethod
    def _convs_to_nhwc(graph: Graph, taken: set[str],
                       min_pixels: int = 0) -> tuple[Graph, set[Tensor]]:
        """Every NCHW conv2d with at least ``min_pixels`` output pixels stored as NHWC; also
        the transposes back it put under the convs' names."""
        new: dict[Tensor, Tensor] = {}
        transposed: dict[tuple[Tensor, tuple[int, ...]], Tensor] = {}
        gathers: set[Tensor] = set()
        for old in graph.computes:
            tensor = relink(old, new)
            operands = conv2d_operands(tensor)
            if operands is not None and tensor.shape[2] * tensor.shape[3] >= min_pixels:
                x_load, w_load = operands
                views = {}
                for load, perm, suffix in ((x_load, NHWC, "nhwc"), (w_load, HWIO, "hwio")):
                    key = (load.tensor, perm)
                    if key not in transposed:
                        transposed[key] = transpose(load.tensor, perm,
                                                    name=_fresh(f"{load.tensor.name}_{suffix}",
                                                                taken))
                    views[load.tensor] = (transposed[key], perm)

                def swap(expr: Expr, views: dict = views) -> Expr | None:
                    if isinstance(expr, Load) and expr.tensor in views:
                        view, perm = views[expr.tensor]
                        return Load(view, _permuted(expr.indices, perm))
                    return None

                assert isinstance(tensor.op, ComputeOp)
                stored = _relabelled(tensor, NHWC, transform(tensor.op.body, swap),
                                     _fresh(f"{tensor.name}_nhwc", taken))
                tensor = _gather_back(tensor, stored, NHWC)
                gathers.add(tensor)
            if tensor is not old:
                new[old] = tensor
        if not new:
            return graph, gathers
        return Graph.from_outputs([new.get(out, out) for out in graph.outputs]), gathers

    @staticmethod
    def _sink(graph: Graph, gathers: set[Tensor], taken: set[str]) -> Graph:
        """The transposes back (``gathers``) moved below the computes that read them and are
        no sum of products (:func:`is_product_reduction`), as far as such computes go."""
        # tensor of the new graph -> (its NHWC-stored value, the permutation back)
        stored_as: dict[Tensor, tuple[Tensor, tuple[int, ...]]] = {}
        for gather in gathers:
            body = gather.op.body
            assert isinstance(body, Load)
            stored_as[gather] = (body.tensor, NHWC)
        new: dict[Tensor, Tensor] = {}
        for old in graph.computes:
            tensor = relink(old, new)
            if old in stored_as and tensor is not old:  # a transpose back, relinked
                body = tensor.op.body
                assert isinstance(body, Load)
                stored_as[tensor] = (body.tensor, stored_as[old][1])
            read = {load.tensor for load in loads_in(tensor.op.body)
                    if load.tensor in stored_as}
            if tensor not in stored_as and not is_product_reduction(tensor) \
                    and tensor.ndim == len(NHWC) and read \
                    and len({stored_as[t][1] for t in read}) == 1:

                def swap(expr: Expr) -> Expr | None:
                    if isinstance(expr, Load) and expr.tensor in stored_as:
                        source, perm = stored_as[expr.tensor]
                        return Load(source, _permuted(expr.indices, perm))
                    return None

                stored = _relabelled(tensor, NHWC, transform(tensor.op.body, swap),
                                     _fresh(f"{tensor.name}_nhwc", taken))
                tensor = _gather_back(tensor, stored, NHWC)
                stored_as[tensor] = (stored, NHWC)
            if tensor is not old:
                new[old] = tensor
        return Graph.from_outputs([new.get(out, out) for out in graph.outputs])


choose_layout = ChooseLayout()

__all__ = ["HWIO", "NHWC", "ChooseLayout", "choose_layout", "conv2d_operands", "conv_kind",
           "is_product_reduction"]
