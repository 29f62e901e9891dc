"""The program as a DAG of tensor expressions (thesis Def. 2), kept in a networkx DiGraph.

Nodes are tensors (placeholders and computes); an edge ``a -> b`` means compute ``b`` reads
``a``. Printing gives the SSA form of thesis Eq. 2.4-2.5.

>>> from tilecraft import te
>>> A = te.placeholder((4, 8), name="A")
>>> r = te.reduce_axis(8, name="r")
>>> S = te.compute((4,), lambda i: te.sum(A[i, r], axis=r), name="S")
>>> g = Graph.from_outputs([S])
>>> [t.name for t in g.inputs], [t.name for t in g.computes]
(['A'], ['S'])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import networkx as nx

from tilecraft.errors import GraphError
from tilecraft.te.tensor import Tensor


class Graph:
    """A DAG of computes, built from its output tensors."""

    def __init__(self, outputs: Sequence[Tensor]):
        if not outputs:
            raise GraphError("a graph needs at least one output tensor")
        for out in outputs:
            if not isinstance(out, Tensor):
                raise GraphError(f"graph outputs must be tensors, got {out!r}")
        self._outputs = tuple(dict.fromkeys(outputs))
        self._dag = nx.DiGraph()
        stack = list(self._outputs)
        visited: set[Tensor] = set()
        while stack:
            tensor = stack.pop()
            if tensor in visited:
                continue
            visited.add(tensor)
            self._dag.add_node(tensor)
            for producer in tensor.inputs:
                self._dag.add_edge(producer, tensor)
                stack.append(producer)
        names: dict[str, Tensor] = {}
        for tensor in self._dag.nodes:
            if tensor.name in names and names[tensor.name] is not tensor:
                raise GraphError(f"two different tensors are both named {tensor.name!r}; give "
                                 "every placeholder and compute of a graph a unique name")
            names[tensor.name] = tensor
        self._by_name = names
        order = list(nx.lexicographical_topological_sort(self._dag, key=self._discovery_key()))
        self._order = tuple(order)

    def _discovery_key(self):  # deterministic order: depth-first discovery from the outputs
        rank: dict[Tensor, int] = {}

        def visit(tensor: Tensor) -> None:
            if tensor in rank:
                return
            for producer in tensor.inputs:
                visit(producer)
            rank[tensor] = len(rank)

        for out in self._outputs:
            visit(out)
        return lambda tensor: rank[tensor]

    @classmethod
    def from_outputs(cls, outputs: Iterable[Tensor] | Tensor) -> Graph:
        """The graph of everything ``outputs`` depend on."""
        if isinstance(outputs, Tensor):
            outputs = [outputs]
        return cls(list(outputs))

    @classmethod
    def of(cls, program: object) -> Graph | None:
        """The graph of a program given as a Graph, a Tensor or a non-empty list of Tensors;
        ``None`` for anything else (each caller raises its own error, naming what it takes).

        >>> from tilecraft import te
        >>> X = te.placeholder((4,), name="X")
        >>> Graph.of(te.compute((4,), lambda i: X[i] + 1.0, name="Y")).outputs[0].name
        'Y'
        >>> Graph.of("Y") is None, Graph.of([]) is None
        (True, True)
        """
        if isinstance(program, Graph):
            return program
        if isinstance(program, Tensor):
            return cls([program])
        if isinstance(program, (list, tuple)) and program and \
                all(isinstance(t, Tensor) for t in program):
            return cls(list(program))
        return None

    @property
    def dag(self) -> nx.DiGraph:
        """The underlying networkx graph (read it, do not modify it)."""
        return self._dag

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return self._outputs

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """Placeholders the caller passes, in topological (first-use) order (constants are not
        inputs: see :attr:`constants`)."""
        return tuple(t for t in self._order if t.is_placeholder and not t.is_constant)

    @property
    def constants(self) -> tuple[Tensor, ...]:
        """Placeholders bound to a value (``te.constant``), in topological order: the graph
        carries them and the runtime passes them to the kernels that read them.

        >>> import numpy as np
        >>> from tilecraft import te
        >>> X = te.placeholder((2,), name="X")
        >>> W = te.constant(np.array([1.0, 2.0], np.float32), name="W")
        >>> g = Graph.from_outputs([te.compute((2,), lambda i: X[i] * W[i], name="Y")])
        >>> [t.name for t in g.inputs], [t.name for t in g.constants]
        (['X'], ['W'])
        """
        return tuple(t for t in self._order if t.is_constant)

    @property
    def computes(self) -> tuple[Tensor, ...]:
        """Compute tensors in a topological order: producers before consumers."""
        return tuple(t for t in self._order if not t.is_placeholder)

    def topological_order(self) -> tuple[Tensor, ...]:
        return self._order

    def tensor(self, name: str) -> Tensor:
        try:
            return self._by_name[name]
        except KeyError:
            raise GraphError(f"no tensor named {name!r} in this graph; it has: "
                             f"{', '.join(sorted(self._by_name))}") from None

    def producers(self, tensor: Tensor) -> list[Tensor]:
        return list(self._dag.predecessors(tensor))

    def consumers(self, tensor: Tensor) -> list[Tensor]:
        return list(self._dag.successors(tensor))

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self.computes)

    def __len__(self) -> int:
        return len(self.computes)

    def __str__(self) -> str:
        args = ", ".join(f"{t.name}: {t.dtype.value}{list(t.shape)}" for t in self.inputs)
        outs = ", ".join(t.name for t in self._outputs)
        lines = [f"graph({args}) -> ({outs}):"]
        lines += [f"  {t.statement()}" for t in self.constants]
        lines += [f"  {t.statement()}" for t in self.computes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Graph({len(self.inputs)} inputs, {len(self.computes)} computes)"
