"""Derive a :class:`~tilecraft.fusion.chain.Chain` from te computes by affine index analysis.

The last operator's loops become chain loops. Walking back link by link, every tensor between
a producer and its consumer (the producer's output and the memory-bound ops after it) gets its
axes expressed as affine indices over chain loops, read off the consumer's loads
(``tilecraft.te.bounds.affine``): ``C[m, l]`` read by ``E = sum_l C[m, l] * D[l, n]`` maps
C's axes to the loops ``m`` and ``l`` — the loops the two GEMMs share. A sliding window
``x[h + rh]`` maps the producer's ``h`` axis to ``h + rh``, so its tile is ``T_h + T_rh - 1``
wide (the halo). The producer's reduce axes become new (private) chain loops.

A memory-bound reduction between two operators (softmax's row max and row sum) reduces its
input along a chain loop; that loop is marked ``full_extent``: the whole extent must be in one
tile for the consumer to see finished values.

>>> from tilecraft import te, ops
>>> A = te.placeholder((64, 32), name="A")
>>> B = te.placeholder((32, 48), name="B")
>>> D = te.placeholder((48, 16), name="D")
>>> C = ops.matmul(A, B, name="C")
>>> E = ops.matmul(ops.relu(C, name="R"), D, name="E")
>>> chain = chain_from_computes([C, E], loop_names={"i": "m", "j": "n", "k": "l", "k1": "k"})
>>> print(chain)
chain C -> E over loops m=64 n=16 l=48 k=32
  C[m, l] = sum_k A[m, k] * B[k, l]  then R
  E[m, n] = sum_l R[m, l] * D[l, n]
>>> chain.private_loops(0)
('k',)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import networkx as nx

from tilecraft.fusion.chain import (
    Chain,
    ChainLoop,
    ChainOp,
    FusionError,
    IndexExpr,
    TensorAccess,
    TensorRole,
)
from tilecraft.fusion.classify import flop_count, non_intensive_reason
from tilecraft.graph import Graph
from tilecraft.te.bounds import affine
from tilecraft.te.expr import AxisKind, IterVar, Load
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import loads_in

LoopMap = dict[IterVar, IndexExpr]


def chain_from_computes(computes: Sequence[Tensor], graph: Graph | None = None,
                        loop_names: Mapping[str, str] | None = None) -> Chain:
    """The chain of the compute-intensive ``computes`` (producer first) in ``graph``.

    ``graph`` (default: the graph of the last compute) says which tensors escape the chain
    (graph outputs, or read by computes outside it): they are written out. ``loop_names``
    renames chain loops afterwards. A :class:`FusionError` says why computes do not chain.
    """
    computes = list(computes)
    if not computes:
        raise FusionError("chain_from_computes needs at least one compute")
    for tensor in computes:
        if not isinstance(tensor, Tensor):
            raise FusionError(f"chain_from_computes takes te tensors, got {tensor!r}")
        reason = non_intensive_reason(tensor)
        if reason is not None:
            raise FusionError(f"{reason}; a chain consists of compute-intensive operators "
                              "(GEMM, batch GEMM, convolution) only")
    graph = graph or Graph.from_outputs([computes[-1]])
    dag = graph.dag
    for tensor in computes:
        if tensor not in dag:
            raise FusionError(f"compute {tensor.name} is not part of the graph")
    betweens = [_between(dag, producer, consumer)
                for producer, consumer in zip(computes, computes[1:])]
    members = set(computes).union(*betweens) if betweens else set(computes)
    _check_blocks(dag, computes, betweens, members)

    loopmap: LoopMap = {}
    chain_loops: list[ChainLoop] = []
    taken: set[str] = set()
    last = computes[-1]
    for axis in (*last.axes, *last.reduce_axes):
        _new_loop(axis, last, len(computes), loopmap, chain_loops, taken)
    full: dict[str, str] = {}
    local_maps: dict[Tensor, LoopMap] = {}
    for index in range(len(computes) - 2, -1, -1):
        producer, consumer = computes[index], computes[index + 1]
        _map_link(producer, consumer, betweens[index], loopmap, local_maps, full)
        for axis in producer.reduce_axes:
            _new_loop(axis, producer, index + 1, loopmap, chain_loops, taken)
    chain_loops = [ChainLoop(lp.name, lp.extent, lp.reduce, lp.op, lp.name in full,
                             full.get(lp.name, "")) for lp in chain_loops]

    ops: list[ChainOp] = []
    for index, tensor in enumerate(computes):
        derived_input = (set(betweens[index - 1]) | {computes[index - 1]}) if index else set()
        attached = betweens[index] if index < len(betweens) else []
        ops.append(_chain_op(tensor, attached, derived_input, loopmap, local_maps,
                             members, graph, index == len(computes) - 1))
    chain = Chain(tuple(ops), tuple(chain_loops))
    return chain.renamed(loop_names) if loop_names else chain


def _between(dag: nx.DiGraph, producer: Tensor, consumer: Tensor) -> list[Tensor]:
    """Computes on paths from ``producer`` to ``consumer`` (topological), all memory-bound."""
    if not nx.has_path(dag, producer, consumer):
        raise FusionError(f"{consumer.name} does not depend on {producer.name}; a chain links "
                          "each operator to the next through the tensors it produces")
    inner = (nx.descendants(dag, producer) & nx.ancestors(dag, consumer))
    for tensor in inner:
        if non_intensive_reason(tensor) is None:
            raise FusionError(f"{tensor.name} lies between {producer.name} and "
                              f"{consumer.name} and is compute-intensive itself; include it in "
                              "the chain")
    derived = inner | {producer}
    read = {load.tensor for load in loads_in(consumer.body) if load.tensor in derived}
    if len(read) != 1:
        names = ", ".join(sorted(t.name for t in read))
        raise FusionError(f"{consumer.name} reads {len(read)} tensors derived from "
                          f"{producer.name} ({names}); a chain link feeds exactly one operand")
    order = {t: i for i, t in enumerate(nx.topological_sort(dag))}
    return sorted(inner, key=order.__getitem__)


def _check_blocks(dag: nx.DiGraph, computes: list[Tensor], betweens: list[list[Tensor]],
                  members: set[Tensor]) -> None:
    """Each operator reads chain tensors only from the block right before it (no skips), and
    nothing computed outside the chain from the chain's own results."""
    for index, tensor in enumerate(computes):
        block = {tensor, *(betweens[index] if index < len(betweens) else [])}
        previous = ({computes[index - 1], *betweens[index - 1]} if index else set())
        for reader in block:
            allowed = block | previous if reader is tensor else block
            for load in loads_in(reader.body):
                sources = [] if load.tensor in members else \
                    [m.name for m in computes if nx.has_path(dag, m, load.tensor)]
                if sources:
                    source = sources[0]
                    raise FusionError(
                        f"{reader.name} reads {load.tensor.name}, which depends on {source} "
                        "through computes outside the chain (a skip connection); the fused "
                        "kernel would have to wait for itself")
                if load.tensor in members and load.tensor not in allowed:
                    raise FusionError(
                        f"{reader.name} reads {load.tensor.name} from an earlier part of the "
                        "chain (a skip connection); its tile is gone by then, so the chain "
                        "cannot be fused across it")


def _new_loop(axis: IterVar, tensor: Tensor, position: int, loopmap: LoopMap,
              chain_loops: list[ChainLoop], taken: set[str]) -> None:
    name = axis.name
    suffix = position
    while name in taken:
        name = f"{axis.name}{suffix}"
        suffix += 1
    taken.add(name)
    loopmap[axis] = IndexExpr.of({name: 1})
    chain_loops.append(ChainLoop(name, axis.extent, axis.kind is AxisKind.REDUCE, tensor.name))


def _compose(load: Load, dim: int, mapping: Mapping[IterVar, IndexExpr],
             where: str) -> IndexExpr | None:
    """Index ``dim`` of ``load`` over chain loops, or ``None`` if it uses an unmapped var."""
    form = affine(load.indices[dim])
    if form is None:
        raise FusionError(f"{where} reads {load.tensor.name} with the non-affine index "
                          f"{load.indices[dim]} in dimension {dim}; the tile analysis needs "
                          "affine indices")
    result = IndexExpr.of({}, form.constant)
    for var, coef in form.coefs:
        image = mapping.get(var) if isinstance(var, IterVar) else None
        if image is None:
            return None
        result = IndexExpr.of(_add_terms(result, image, coef), result.constant
                              + coef * image.constant)
    return result


def _add_terms(base: IndexExpr, image: IndexExpr, coef: int) -> dict[str, int]:
    terms = dict(base.terms)
    for loop, c in image.terms:
        terms[loop] = terms.get(loop, 0) + coef * c
    return terms


def _map_link(producer: Tensor, consumer: Tensor, between: list[Tensor], loopmap: LoopMap,
              local_maps: dict[Tensor, LoopMap],
              full: dict[str, str]) -> None:
    """Express the axes of ``producer`` and of the ops ``between`` over chain loops."""
    derived = set(between) | {producer}
    readers = [consumer, *reversed(between)]  # every reader before the tensors it reads
    reduced: list[tuple[Tensor, Tensor, int]] = []
    for reader in readers:
        for axis in reader.axes:
            if axis not in loopmap:
                raise FusionError(f"{reader.name} lies between {producer.name} and "
                                  f"{consumer.name}, but its axis {axis.name} is not read "
                                  "elementwise on the way to the consumer; the tile analysis "
                                  "cannot place it")
        local_reduce = set(reader.reduce_axes) if reader is not consumer else set()
        for load in loads_in(reader.body):
            if load.tensor not in derived:
                continue
            for dim, axis in enumerate(load.tensor.axes):
                if any(v in local_reduce for v in _vars(load, dim)):
                    reduced.append((reader, load.tensor, dim))
                    continue
                expr = _compose(load, dim, loopmap, reader.name)
                if expr is None:
                    raise FusionError(f"{reader.name} indexes {load.tensor.name} with "
                                      f"{load.indices[dim]}, which mixes loops the analysis "
                                      "cannot map onto the chain")
                known = loopmap.get(axis)
                if known is not None and known != expr:
                    raise FusionError(
                        f"{load.tensor.name} is read at {known} and at {expr} in dimension "
                        f"{dim} between {producer.name} and {consumer.name}; the tile analysis "
                        "needs one access pattern per dimension")
                loopmap[axis] = expr
    for reader, tensor, dim in reduced:
        expr = loopmap.get(tensor.axes[dim])
        if expr is None:
            raise FusionError(f"{reader.name} reduces dimension {dim} of {tensor.name}, which "
                              "nothing reads elementwise; the chain cannot be tiled through it")
        for loop in expr.loops:
            full.setdefault(loop, f"{reader.name} reduces {tensor.name} along it")
        local = local_maps.setdefault(reader, {})
        for var in _vars(reader_load(reader, tensor), dim):
            if var in reader.reduce_axes:
                local[var] = expr
    for axis in producer.axes:
        if axis not in loopmap:
            raise FusionError(f"dimension {axis.name} of {producer.name} is never read by "
                              f"{consumer.name}; a chain link must consume the whole tile")


def reader_load(reader: Tensor, tensor: Tensor) -> Load:
    for load in loads_in(reader.body):
        if load.tensor is tensor:
            return load
    raise FusionError(f"{reader.name} does not read {tensor.name}")


def _vars(load: Load, dim: int) -> list[IterVar]:
    form = affine(load.indices[dim])
    if form is None:
        return []
    return [v for v, _ in form.coefs if isinstance(v, IterVar)]


def _escapes(tensor: Tensor, members: set[Tensor], graph: Graph) -> bool:
    if tensor in graph.outputs:
        return True
    return any(reader not in members for reader in graph.consumers(tensor))


def _chain_op(tensor: Tensor, attached: list[Tensor], derived_input: set[Tensor],
              loopmap: LoopMap, local_maps: dict[Tensor, LoopMap], members: set[Tensor],
              graph: Graph, last: bool) -> ChainOp:
    accesses: list[TensorAccess] = []
    seen: set[tuple[str, tuple[IndexExpr, ...]]] = set()

    def add(access: TensorAccess) -> None:
        key = (access.tensor, access.indices)
        if key not in seen:
            seen.add(key)
            accesses.append(access)

    def loads_of(reader: Tensor, mapping: Mapping[IterVar, IndexExpr]) -> None:
        for load in loads_in(reader.body):
            if load.tensor in members and load.tensor not in derived_input:
                continue  # produced inside this block: already listed as an output
            indices = []
            for dim in range(load.tensor.ndim):
                expr = _compose(load, dim, mapping, reader.name)
                if expr is None:
                    raise FusionError(f"{reader.name} reads {load.tensor.name} with an index "
                                      f"({load.indices[dim]}) the chain cannot map")
                indices.append(expr)
            role = TensorRole.INTERMEDIATE if load.tensor in derived_input else TensorRole.INPUT
            add(TensorAccess(load.tensor.name, tuple(indices), role, load.tensor.dtype))

    loads_of(tensor, loopmap)
    role = TensorRole.OUTPUT if _escapes(tensor, members, graph) or last else \
        TensorRole.INTERMEDIATE
    output = TensorAccess(tensor.name, tuple(loopmap[a] for a in tensor.axes), role,
                          tensor.dtype)
    add(output)
    footprints = {tensor.name: output.footprint()}
    flops = flop_count(tensor)
    for step in attached:
        mapping = {**loopmap, **local_maps.get(step, {})}
        loads_of(step, mapping)
        access = TensorAccess(step.name, tuple(loopmap[a] for a in step.axes),
                              TensorRole.OUTPUT if _escapes(step, members, graph)
                              else TensorRole.INTERMEDIATE, step.dtype)
        footprint = access.footprint()
        same = [t.name for t in step.inputs if footprints.get(t.name) == footprint]
        if same:
            access = TensorAccess(access.tensor, access.indices, access.role, access.dtype,
                                  shares_buffer_with=same[0])
        footprints[step.name] = footprint
        add(access)
        flops += flop_count(step)
    op_loops = {loop for a in accesses for loop in a.loops}
    reduce_loops = tuple(loop for axis in tensor.reduce_axes for loop in loopmap[axis].loops)
    ordered = tuple(dict.fromkeys([*(lp for a in tensor.axes for lp in loopmap[a].loops),
                                   *reduce_loops, *sorted(op_loops)]))
    return ChainOp(tensor.name, ordered, reduce_loops, tuple(accesses),
                   tuple(t.name for t in attached), flops)
