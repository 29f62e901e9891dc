"""Static analysis of an operator's small graph (thesis §4.3.1, Fig. 4.3 c).

FlexTensor sees an operator as a small graph whose nodes are tensor expressions. Before it
builds a schedule space it collects two kinds of facts:

- numbers, per node: the spatial loops (``#sl``) and reduce loops (``#rl``), their trip counts
  (``stc``, ``rtc``) and their order;
- structure: the number of nodes (``#node``), and per node its inputs (``#in``), outputs
  (``#out``, always 1 here) and consumers (``#cs``).

:func:`analyze` adds what schedule-space generation needs besides: which nodes may be inlined
(elementwise, read by exactly one compute, not an output of the operator) and each node's
contiguous axis (the loop a vector unit should run along). The result is plain data (names and
numbers, no tensors), so it prints, compares and pickles.

>>> from tilecraft import te
>>> A = te.placeholder((64, 32), name="A")
>>> B = te.placeholder((32, 48), name="B")
>>> k = te.reduce_axis(32, name="k")
>>> C = te.compute((64, 48), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> info = analyze(C)
>>> node = info.node("C")
>>> node.num_spatial, node.spatial_trip_counts, node.num_reduce, node.reduce_trip_counts
(2, (64, 48), 1, (32,))
>>> node.order, node.num_inputs, node.num_consumers, node.contiguous_axis
(('i', 'j', 'k'), 2, 0, 'j')
>>> print(info)
operator C: 1 node, inputs A, B, outputs C
  C: spatial i=64 j=48, reduce k=32, order i j k, in 2, out 1, consumers 0, contiguous j
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.graph import Graph
from tilecraft.search.errors import SearchError
from tilecraft.te.bounds import affine
from tilecraft.te.expr import AxisKind, IterVar
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import loads_in

__all__ = ["LoopInfo", "NodeAnalysis", "OperatorAnalysis", "analyze"]


@dataclass(frozen=True)
class LoopInfo:
    """One loop of a node's nest: the axis name, its trip count and its kind."""

    name: str
    extent: int
    kind: AxisKind

    @property
    def is_reduce(self) -> bool:
        return self.kind is AxisKind.REDUCE

    def __str__(self) -> str:
        return f"{self.name}={self.extent}"


@dataclass(frozen=True)
class NodeAnalysis:
    """The numbers and structure of one compute node of the small graph."""

    name: str
    dtype: str
    spatial: tuple[LoopInfo, ...]
    reduce: tuple[LoopInfo, ...]
    inputs: tuple[str, ...]
    consumers: tuple[str, ...]
    is_output: bool
    inlineable: bool
    contiguous_axis: str | None

    @property
    def loops(self) -> tuple[LoopInfo, ...]:
        """Every loop in its original order: spatial loops, then reduce loops."""
        return self.spatial + self.reduce

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(loop.name for loop in self.loops)

    @property
    def num_spatial(self) -> int:
        return len(self.spatial)

    @property
    def num_reduce(self) -> int:
        return len(self.reduce)

    @property
    def spatial_trip_counts(self) -> tuple[int, ...]:
        return tuple(loop.extent for loop in self.spatial)

    @property
    def reduce_trip_counts(self) -> tuple[int, ...]:
        return tuple(loop.extent for loop in self.reduce)

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    @property
    def num_outputs(self) -> int:
        return 1  # every te compute produces one tensor

    @property
    def num_consumers(self) -> int:
        return len(self.consumers)

    @property
    def is_elementwise(self) -> bool:
        """No reduction: each output element comes from one evaluation of the body."""
        return not self.reduce

    @property
    def iterations(self) -> int:
        """Trip count of the whole nest (product of every loop's extent)."""
        total = 1
        for loop in self.loops:
            total *= loop.extent
        return total

    def loop(self, name: str) -> LoopInfo:
        for loop in self.loops:
            if loop.name == name:
                return loop
        raise SearchError(f"node {self.name} has no loop {name!r}; its loops are "
                          f"{', '.join(self.order) or 'none'}")

    def __str__(self) -> str:
        spatial = " ".join(str(loop) for loop in self.spatial) or "-"
        reduce = " ".join(str(loop) for loop in self.reduce) or "-"
        parts = [f"spatial {spatial}", f"reduce {reduce}", f"order {' '.join(self.order)}",
                 f"in {self.num_inputs}", f"out {self.num_outputs}",
                 f"consumers {self.num_consumers}"]
        if self.inlineable:
            parts.append("inlineable")
        if self.contiguous_axis is not None:
            parts.append(f"contiguous {self.contiguous_axis}")
        return f"{self.name}: " + ", ".join(parts)


@dataclass(frozen=True)
class OperatorAnalysis:
    """The static analysis of an operator: its compute nodes in topological order (producers
    first), the operator's inputs (placeholders) and outputs, and the ``anchor``: the node
    whose loop nest the schedule space is built for (the operator's first compute output)."""

    nodes: tuple[NodeAnalysis, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    anchor: str

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def name(self) -> str:
        return self.anchor

    def node(self, name: str | None = None) -> NodeAnalysis:
        """The node called ``name`` (the anchor when ``None``)."""
        name = self.anchor if name is None else name
        for node in self.nodes:
            if node.name == name:
                return node
        raise SearchError(f"operator {self.anchor} has no compute node {name!r}; its nodes "
                          f"are {', '.join(n.name for n in self.nodes)}")

    @property
    def inlineable(self) -> tuple[str, ...]:
        """Names of the nodes that may be inlined into their consumer."""
        return tuple(node.name for node in self.nodes if node.inlineable)

    def __str__(self) -> str:
        count = f"{self.num_nodes} node{'s' if self.num_nodes != 1 else ''}"
        head = (f"operator {self.anchor}: {count}, inputs {', '.join(self.inputs) or '-'}, "
                f"outputs {', '.join(self.outputs)}")
        return "\n".join([head, *(f"  {node}" for node in self.nodes)])


def _loads_along(tensor: Tensor, axis: IterVar) -> int:
    """How many loads of ``tensor``'s body step by one element along ``axis`` (coefficient 1
    in their last index)."""
    count = 0
    for load in loads_in(tensor.body):
        form = affine(load.indices[-1]) if load.indices else None
        if form is not None and form.terms().get(axis) == 1:
            count += 1
    return count


def contiguous_axis(tensor: Tensor) -> str | None:
    """The axis a vector unit should run along: the innermost spatial axis of extent > 1 (the
    output is stored contiguously along it) — unless no load walks memory contiguously along
    it while some do along the innermost reduce axis and that axis is at least as long, as in
    a row reduction (softmax's max and sum, gemv); then that reduce axis.

    >>> from tilecraft import te
    >>> A = te.placeholder((7, 13), name="A")
    >>> r = te.reduce_axis(13, name="r")
    >>> contiguous_axis(te.compute((7,), lambda i: te.max(A[i, r], axis=r), name="M"))
    'r'
    """
    spatial = [axis for axis in tensor.axes if axis.extent > 1]
    reduce = [axis for axis in tensor.reduce_axes if axis.extent > 1]
    if not spatial:
        return reduce[-1].name if reduce else None
    inner = spatial[-1]
    if reduce and _loads_along(tensor, inner) == 0 and _loads_along(tensor, reduce[-1]) > 0 \
            and reduce[-1].extent >= inner.extent:
        return reduce[-1].name
    return inner.name


def _as_graph(program: Graph | Tensor | OperatorAnalysis) -> Graph:
    graph = Graph.of(program)
    if graph is not None:
        return graph
    raise SearchError(f"analyze() takes a Graph, a Tensor or a list of output tensors, got "
                      f"{type(program).__name__}; build the operator with tilecraft.te or "
                      "tilecraft.ops first")


def analyze(program: Graph | Tensor | list[Tensor] | OperatorAnalysis) -> OperatorAnalysis:
    """The static analysis of an operator given as a graph, its output tensor, or a list of
    output tensors (an :class:`OperatorAnalysis` is returned unchanged)."""
    if isinstance(program, OperatorAnalysis):
        return program
    graph = _as_graph(program)
    computes = graph.computes
    outputs = [t for t in graph.outputs if not t.is_placeholder]
    if not outputs:
        raise SearchError(f"the operator with outputs {', '.join(t.name for t in graph.outputs)}"
                          " computes nothing (its outputs are placeholders); there is no loop "
                          "nest to schedule")
    output_names = {t.name for t in graph.outputs}
    nodes = []
    for tensor in computes:
        consumers = tuple(c.name for c in graph.consumers(tensor))
        is_output = tensor.name in output_names
        spatial = tuple(LoopInfo(a.name, a.extent, AxisKind.SPATIAL) for a in tensor.axes)
        reduce = tuple(LoopInfo(a.name, a.extent, AxisKind.REDUCE) for a in tensor.reduce_axes)
        nodes.append(NodeAnalysis(
            name=tensor.name, dtype=tensor.dtype.value, spatial=spatial, reduce=reduce,
            inputs=tuple(t.name for t in tensor.inputs), consumers=consumers,
            is_output=is_output,
            inlineable=not reduce and len(consumers) == 1 and not is_output,
            contiguous_axis=contiguous_axis(tensor)))
    return OperatorAnalysis(nodes=tuple(nodes), inputs=tuple(t.name for t in graph.inputs),
                            outputs=tuple(t.name for t in graph.outputs),
                            anchor=outputs[0].name)
