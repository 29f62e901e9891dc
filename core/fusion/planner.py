"""The fusion planner: which computes of a graph run together (thesis §3.2-3.4, §4.6.2).

1. Chains: compute-intensive operators linked through memory-bound operators only (GEMM ->
   softmax -> GEMM, conv -> ReLU -> pad -> conv) are derived as :class:`Chain` s and solved
   (:func:`solve_chain`). A chain is fused when its tiles fit and it moves less data than its
   operators run one by one; otherwise it falls back to unfused code, and the plan says why.
2. Every other compute-intensive operator forms a group of its own.
3. Memory-bound operators join their producer's group as an epilogue (elementwise on a
   compute-intensive producer's tile; any pattern inside a memory-bound group) when Eq. 4.10's
   benefit is positive; otherwise they start a memory-bound group.
4. A memory-bound group whose results feed a single group is fused into it as a prologue when
   Eq. 4.10 says so: the saved transfers must pay for the recomputation (each element is
   recomputed every time the consumer reloads it — Algorithm 1 says how often).

>>> from tilecraft import te, ops
>>> from tilecraft.graph import Graph
>>> from tilecraft.fusion.benefit import PeakFigures
>>> A = te.placeholder((256, 64), name="A")
>>> B = te.placeholder((64, 256), name="B")
>>> D = te.placeholder((256, 64), name="D")
>>> C = ops.matmul(A, B, name="C")
>>> E = ops.relu(ops.matmul(ops.relu(C, name="R"), D, name="E"), name="out")
>>> peaks = PeakFigures(bandwidth_bytes_per_s=40e9, flops_per_s=500e9)
>>> plan = plan_fusion(Graph.from_outputs([E]), capacity_bytes=64 * 1024, peaks=peaks)
>>> [group.computes for group in plan.groups]
[('C', 'R', 'E', 'out')]
>>> plan.decision("out").action.value
'into producer'
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import networkx as nx

from tilecraft.dtypes import DType
from tilecraft.fusion.benefit import FusionBenefit, PeakFigures, fusion_benefit
from tilecraft.fusion.chain import Chain, FusionError, TensorRole
from tilecraft.fusion.classify import (
    flop_count,
    is_compute_intensive,
    is_elementwise_of,
    iteration_points,
)
from tilecraft.fusion.constraints import Constraints
from tilecraft.fusion.derive import chain_from_computes
from tilecraft.fusion.solver import ChainSolution, solve_chain
from tilecraft.graph import Graph
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor


class GroupKind(str, enum.Enum):
    CHAIN = "chain"        # a fused chain of compute-intensive operators
    COMPUTE = "compute"    # one compute-intensive operator
    MEMORY = "memory"      # memory-bound operators only


class Action(str, enum.Enum):
    FUSE_CHAIN = "fused chain"
    UNFUSED_CHAIN = "unfused chain"
    INTO_PRODUCER = "into producer"
    INTO_CONSUMER = "into consumer"
    STANDALONE = "standalone"


@dataclass(frozen=True)
class FusionGroup:
    """Computes that run as one fused kernel; ``solution`` holds the tile analysis of its
    compute-intensive operators (the chain, or the single operator)."""

    index: int
    kind: GroupKind
    computes: tuple[str, ...]
    anchors: tuple[str, ...] = ()
    solution: ChainSolution | None = field(default=None, repr=False)

    @property
    def chain(self) -> Chain | None:
        return self.solution.chain if self.solution is not None else None

    def tile_tree(self):  # -> TileTree
        if self.solution is None or not self.solution.fused:
            raise FusionError(f"group {self.index} ({', '.join(self.computes)}) has no solved "
                              "tiles")
        return self.solution.tile_tree()


@dataclass(frozen=True)
class FusionDecision:
    """What the planner decided about ``subject`` (a compute, or a chain ``C -> E``)."""

    subject: str
    action: Action
    group: int
    reason: str
    benefit: FusionBenefit | None = None

    def __str__(self) -> str:
        return f"{self.subject}: {self.action.value} (group {self.group}) - {self.reason}"


@dataclass(frozen=True)
class FusionPlan:
    groups: tuple[FusionGroup, ...]
    decisions: tuple[FusionDecision, ...]
    target: str

    def group_of(self, compute: str) -> FusionGroup:
        for group in self.groups:
            if compute in group.computes:
                return group
        raise FusionError(f"no group holds {compute!r}; the plan's computes are "
                          f"{', '.join(c for g in self.groups for c in g.computes)}")

    def decision(self, subject: str) -> FusionDecision:
        for decision in self.decisions:
            if decision.subject == subject:
                return decision
        raise FusionError(f"the plan made no decision about {subject!r}; its subjects are "
                          f"{', '.join(d.subject for d in self.decisions)}")

    @property
    def chains(self) -> tuple[FusionGroup, ...]:
        return tuple(g for g in self.groups if g.kind is GroupKind.CHAIN)

    def __str__(self) -> str:
        lines = [f"fusion plan for {self.target}: {len(self.groups)} groups"]
        for group in self.groups:
            line = f"  group {group.index} ({group.kind.value}): {', '.join(group.computes)}"
            if group.kind is GroupKind.CHAIN and group.solution is not None:
                line += f"  [{group.solution.reason}]"
            lines.append(line)
        lines.append("decisions:")
        lines += [f"  {decision}" for decision in self.decisions]
        return "\n".join(lines)


ConstraintSource = Constraints | Callable[[Chain], Constraints] | None


def plan_fusion(graph: Graph, spec: TargetSpec | None = None, *,
                capacity_bytes: float | None = None, levels: Sequence[str] | None = None,
                constraints: ConstraintSource = None, capacity_fraction: float = 1.0,
                peaks: PeakFigures | None = None) -> FusionPlan:
    """Plan the fusion of ``graph`` for a target ``spec`` (its memory hierarchy and peak
    figures), or for one on-chip level of ``capacity_bytes`` with ``peaks`` given.

    ``constraints`` are tile constraints by loop name (applied to every chain that has such a
    loop), or a function giving them for a chain.
    """
    if spec is None and (capacity_bytes is None or peaks is None):
        raise FusionError("plan_fusion needs a target spec, or capacity_bytes= and peaks= "
                          "(PeakFigures) for a single on-chip level")
    if peaks is None:
        assert spec is not None
        peaks = PeakFigures.from_spec(spec, _main_dtype(graph))
    planner = _Planner(graph, spec, capacity_bytes, levels, constraints, capacity_fraction, peaks)
    return planner.run()


def _names(chain: Chain) -> list[str]:
    """``chain``'s operator and tensor names in the order :func:`structure_key` numbers them."""
    names: dict[str, None] = {}
    for op in chain.ops:
        names.setdefault(op.name)
        for name in op.attached:
            names.setdefault(name)
        for access in op.accesses:
            names.setdefault(access.tensor)
            if access.shares_buffer_with:
                names.setdefault(access.shares_buffer_with)
    for loop in chain.loops:
        if loop.op:
            names.setdefault(loop.op)
    return list(names)


def _renamed(solution: ChainSolution, chain: Chain) -> ChainSolution:
    """``solution`` of a chain with ``chain``'s structure, as ``chain``'s: its data movement
    entries name ``chain``'s operators and tensors."""
    rename = dict(zip(_names(solution.chain), _names(chain)))
    levels = tuple(dataclasses.replace(level, movement=dataclasses.replace(
        level.movement, chain=chain, entries=tuple(
            dataclasses.replace(entry, op=rename.get(entry.op, entry.op),
                                tensor=rename.get(entry.tensor, entry.tensor))
            for entry in level.movement.entries))) for level in solution.levels)
    return dataclasses.replace(solution, chain=chain, levels=levels)


def structure_key(chain: Chain) -> Hashable:
    """``chain`` without its tensors' and operators' names (each replaced by its order of first
    appearance): two chains with the same key have the same loops, accesses and work, so
    :func:`solve_chain` gives them the same orders, tiles and costs.

    >>> from tilecraft import ops, te
    >>> def gemm(prefix):
    ...     A = te.placeholder((64, 32), name=prefix + "A")
    ...     B = te.placeholder((32, 48), name=prefix + "B")
    ...     return chain_from_computes([ops.matmul(A, B, name=prefix + "C")])
    >>> structure_key(gemm("x")) == structure_key(gemm("y"))
    True
    """
    names = {name: number for number, name in enumerate(_names(chain))}

    def canon(name: str) -> int | str:
        return names[name] if name else ""

    ops = tuple((canon(op.name), op.loops, op.reduce_loops, op.flops,
                 tuple(canon(a) for a in op.attached),
                 tuple((canon(access.tensor), access.indices, access.role, access.dtype,
                        canon(access.shares_buffer_with)) for access in op.accesses))
                for op in chain.ops)
    loops = tuple((loop.name, loop.extent, loop.reduce, canon(loop.op), loop.full_extent)
                  for loop in chain.loops)
    return ops, loops


def _main_dtype(graph: Graph) -> DType:
    for tensor in graph.computes:
        if is_compute_intensive(tensor):
            return tensor.dtype
    return DType.FLOAT32


@dataclass
class _Group:
    kind: GroupKind
    members: list[Tensor]
    anchors: list[Tensor]
    tail: set[Tensor]
    solution: ChainSolution | None = None


class _Planner:
    def __init__(self, graph: Graph, spec: TargetSpec | None, capacity: float | None,
                 levels: Sequence[str] | None, constraints: ConstraintSource,
                 fraction: float, peaks: PeakFigures) -> None:
        self.graph = graph
        self.spec = spec
        self.capacity = capacity
        self.levels = levels
        self.constraints = constraints
        self.fraction = fraction
        self.peaks = peaks
        self.groups: list[_Group] = []
        self.group_of: dict[Tensor, _Group] = {}
        self.decisions: dict[str, tuple[Action, _Group, str, FusionBenefit | None]] = {}
        self.order = {t: i for i, t in enumerate(graph.topological_order())}
        self.single: dict[Tensor, ChainSolution | None] = {}
        #: solutions by the chain's structure: a network's repeated layers are solved once
        self.solved: dict[Hashable, ChainSolution] = {}

    # driver -----------------------------------------------------------------------------------
    def run(self) -> FusionPlan:
        intensive = [t for t in self.graph.computes if is_compute_intensive(t)]
        for path in self._chain_paths(intensive):
            self._plan_chain(path)
        for tensor in intensive:
            if tensor not in self.group_of:
                group = self._add(_Group(GroupKind.COMPUTE, [tensor], [tensor], {tensor},
                                         self._solve([tensor])))
                if tensor.name not in self.decisions:
                    self._decide(tensor.name, Action.STANDALONE, group,
                                 "compute-intensive, no chain partner")
        for tensor in self.graph.computes:
            if tensor not in self.group_of:
                self._place_memory_bound(tensor)
        self._prologues()
        return self._finish()

    def _add(self, group: _Group) -> _Group:
        self.groups.append(group)
        for member in group.members:
            self.group_of[member] = group
        return group

    def _decide(self, subject: str, action: Action, group: _Group, reason: str,
                benefit: FusionBenefit | None = None) -> None:
        self.decisions[subject] = (action, group, reason, benefit)

    # chains -----------------------------------------------------------------------------------
    def _chain_paths(self, intensive: list[Tensor]) -> list[list[Tensor]]:
        dag = self.graph.dag
        successors: dict[Tensor, set[Tensor]] = {}
        for start in intensive:
            found: set[Tensor] = set()
            stack = list(dag.successors(start))
            seen: set[Tensor] = set()
            while stack:
                node = stack.pop()
                if node in seen:
                    continue
                seen.add(node)
                if is_compute_intensive(node):
                    found.add(node)
                else:
                    stack.extend(dag.successors(node))
            successors[start] = found
        predecessors: dict[Tensor, set[Tensor]] = {t: set() for t in intensive}
        for start, found in successors.items():
            for node in found:
                predecessors[node].add(start)
        links = {start: next(iter(found)) for start, found in successors.items()
                 if len(found) == 1 and self._feeds_chain(start, predecessors[next(iter(found))])}
        paths = []
        for start in intensive:
            if start in links and start not in links.values():
                path = [start]
                while path[-1] in links:
                    path.append(links[path[-1]])
                paths.append(path)
        return paths

    @staticmethod
    def _feeds_chain(start: Tensor, feeding: set[Tensor]) -> bool:
        """Whether the chain link from ``start`` to the compute-intensive operator that
        ``feeding`` (``start`` among them) all reach is the one to plan: ``start`` is its only
        compute-intensive producer, or the one whose result is strictly the largest — the
        intermediate fusion would keep on chip (attention's ``Q K^T`` scores, 512 x 512 per
        head, over the value projection feeding the same GEMM); the others are then the
        chain's inputs."""
        if len(feeding) == 1:
            return True
        others = [t.size for t in feeding if t is not start]
        return start.size > max(others)

    def _plan_chain(self, path: list[Tensor]) -> None:
        try:
            chain = chain_from_computes(path, self.graph)
        except FusionError as err:
            if len(path) > 2:
                for first in range(len(path) - 1):
                    pair = path[first:first + 2]
                    if not any(t in self.group_of for t in pair):
                        self._plan_chain(pair)
                return
            self._unfused(path, str(err))
            return
        solution = self._solve_chain(chain)
        if not solution.fused:
            self._unfused(path, solution.reason)
            return
        fused_cost = self._cost(solution)
        unfused_cost = sum(self._single_cost(t) for t in path) + self._between_cost(path)
        unit = "cycles" if self.spec is not None else "bytes"
        comparison = f"{fused_cost:,.0f} {unit} fused vs {unfused_cost:,.0f} unfused"
        if fused_cost > unfused_cost:
            self._unfused(path, f"fusing moves more data ({comparison})")
            return
        members = sorted(set(path) | set(self._between(path)), key=self.order.__getitem__)
        group = self._add(_Group(GroupKind.CHAIN, members, list(path), {path[-1]}, solution))
        self._decide(chain.names, Action.FUSE_CHAIN, group, f"{solution.reason} ({comparison})")
        for tensor in members:
            if tensor not in path:
                self._decide(tensor.name, Action.INTO_PRODUCER, group,
                             f"between the operators of chain {chain.names}")

    def _unfused(self, path: list[Tensor], reason: str) -> None:
        groups = []
        for tensor in path:
            if tensor not in self.group_of:
                groups.append(self._add(_Group(GroupKind.COMPUTE, [tensor], [tensor], {tensor},
                                               self._solve([tensor]))))
        if groups:
            self._decide(" -> ".join(t.name for t in path), Action.UNFUSED_CHAIN, groups[0],
                         reason)

    def _between(self, path: list[Tensor]) -> set[Tensor]:
        dag = self.graph.dag
        inner: set[Tensor] = set()
        for producer, consumer in zip(path, path[1:]):
            inner |= nx.descendants(dag, producer) & nx.ancestors(dag, consumer)
        return inner

    def _constraints_for(self, chain: Chain) -> dict:
        if self.constraints is None:
            return {}
        if callable(self.constraints):
            return dict(self.constraints(chain))
        return {loop: c for loop, c in self.constraints.items() if loop in chain.loop_names}

    def _solve_chain(self, chain: Chain) -> ChainSolution:
        """:func:`solve_chain` of ``chain``, or the solution of an earlier chain of the same
        structure (:func:`structure_key`: ResNet-50's 16 blocks repeat a few shapes) with its
        tensors and operators renamed to ``chain``'s (the same orders, tiles and costs).
        ResNet-50's plan, 1 thread, Xeon family 6 model 167, load ~2: 20.3 -> 6.8 s."""
        constraints = self._constraints_for(chain)
        key = (structure_key(chain), tuple(sorted((name, repr(c))
                                                  for name, c in constraints.items())))
        known = self.solved.get(key)
        if known is not None:
            return _renamed(known, chain)
        solution = solve_chain(chain, self.capacity if self.spec is None else None,
                               spec=self.spec, levels=self.levels, constraints=constraints,
                               capacity_fraction=self.fraction)
        self.solved[key] = solution
        return solution

    def _solve(self, path: list[Tensor]) -> ChainSolution | None:
        """The solution of one compute-intensive operator on its own (cached)."""
        (tensor,) = path
        if tensor not in self.single:
            try:
                self.single[tensor] = self._solve_chain(chain_from_computes(path, self.graph))
            except FusionError:
                self.single[tensor] = None
        return self.single[tensor]

    def _cost(self, solution: ChainSolution) -> float:
        if self.spec is not None:
            return float(solution.cost_cycles or 0.0)
        return float(solution.level.volume_bytes)

    def _dram_cost(self, nbytes: float) -> float:
        if self.spec is None:
            return nbytes
        return nbytes / self.spec.memory.outermost.bandwidth_bytes_per_cycle

    def _single_cost(self, tensor: Tensor) -> float:
        solution = self._solve([tensor])
        if solution is not None and solution.fused:
            return self._cost(solution)
        touched = sum(_bytes(t) for t in tensor.inputs) + _bytes(tensor)
        return self._dram_cost(touched)

    def _between_cost(self, path: list[Tensor]) -> float:
        return self._dram_cost(sum(sum(_bytes(i) for i in t.inputs) + _bytes(t)
                                   for t in self._between(path)))

    # memory-bound operators -------------------------------------------------------------------
    def _place_memory_bound(self, tensor: Tensor) -> None:
        producers = [p for p in self.graph.producers(tensor) if not p.is_placeholder]
        groups = {id(self.group_of[p]): self.group_of[p] for p in producers}
        if len(groups) == 1:
            (group,) = groups.values()
            problem = self._epilogue_problem(tensor, group, producers)
            if problem is None:
                gain = self._epilogue_benefit(tensor, group, producers)
                if gain.worthwhile:
                    group.members.append(tensor)
                    group.tail.add(tensor)
                    self.group_of[tensor] = group
                    names = ", ".join(p.name for p in producers)
                    self._decide(tensor.name, Action.INTO_PRODUCER, group,
                                 f"epilogue of {names}: {gain}", gain)
                    return
                reason = f"fusing into its producer does not pay: {gain}"
            else:
                reason = problem
        elif not groups:
            reason = "reads only inputs of the graph"
        else:
            reason = f"reads results of {len(groups)} different groups"
        group = self._add(_Group(GroupKind.MEMORY, [tensor], [], {tensor}))
        self._decide(tensor.name, Action.STANDALONE, group, reason)

    def _epilogue_problem(self, tensor: Tensor, group: _Group,
                          producers: list[Tensor]) -> str | None:
        if group.kind is GroupKind.MEMORY:
            return None
        for producer in producers:
            if producer not in group.tail:
                return (f"reads {producer.name} from inside the fused group; an epilogue reads "
                        "the group's result")
            if not is_elementwise_of(tensor, producer):
                return (f"reads {producer.name} other than elementwise (a reduction or a "
                        "broadcast), so it cannot run on the producer's tiles as they finish")
        return None

    def _epilogue_benefit(self, tensor: Tensor, group: _Group,
                          producers: list[Tensor]) -> FusionBenefit:
        saved = 0.0
        for producer in dict.fromkeys(producers):
            kept_inside = producer not in self.graph.outputs and all(
                c is tensor or self.group_of.get(c) is group
                for c in self.graph.consumers(producer))
            saved += _bytes(producer) * (2 if kept_inside else 1)
        return fusion_benefit(saved, 0.0, 1, self.peaks)

    def _prologues(self) -> None:
        memory_groups = [g for g in self.groups if g.kind is GroupKind.MEMORY]
        memory_groups.sort(key=lambda g: -max(self.order[m] for m in g.members))
        for group in memory_groups:
            if any(m in self.graph.outputs for m in group.members):
                continue
            outside = {c for m in group.members for c in self.graph.consumers(m)
                       if self.group_of[c] is not group}
            targets = {id(self.group_of[c]): self.group_of[c] for c in outside}
            if len(targets) != 1:
                continue
            (target,) = targets.values()
            exported = [m for m in group.members
                        if any(c in outside for c in self.graph.consumers(m))]
            reuse = max(self._reuse(m, target) for m in exported)
            work = sum(flop_count(m) for m in group.members)
            gain = fusion_benefit(2.0 * sum(_bytes(m) for m in exported),
                                  -work * (reuse - 1.0), 1, self.peaks)
            names = ", ".join(a.name for a in target.anchors) or \
                ", ".join(m.name for m in target.members)
            if not gain.worthwhile:
                for member in group.members:
                    action, owner, reason, benefit = self.decisions[member.name]
                    self._decide(member.name, action, owner,
                                 f"{reason}; fusing into its consumer {names} does not pay "
                                 f"(recomputed {reuse:,.0f}x): {gain}", benefit)
                continue
            for member in group.members:
                target.members.append(member)
                self.group_of[member] = target
                self._decide(member.name, Action.INTO_CONSUMER, target,
                             f"prologue of {names} (recomputed {reuse:,.0f}x): {gain}", gain)
            self.groups.remove(group)

    def _reuse(self, tensor: Tensor, group: _Group) -> float:
        """How often ``group`` recomputes each element of ``tensor`` when it is fused in: the
        reloads of its tiles in the group's solution (optimistic: the outermost level), else
        the reads per element."""
        solution = group.solution
        if solution is not None and solution.fused:
            level = solution.levels[0]
            for entry in level.movement.entries:
                if entry.tensor == tensor.name and entry.role is TensorRole.INPUT:
                    moved = level.movement.evaluate(level.tiles).per_tensor[tensor.name]
                    return max(1.0, float(moved) / tensor.size)
        reads = [iteration_points(c) / tensor.size for c in self.graph.consumers(tensor)
                 if self.group_of.get(c) is group]
        return max([1.0, *reads])

    # result -----------------------------------------------------------------------------------
    def _finish(self) -> FusionPlan:
        ordered = sorted(self.groups, key=lambda g: min(self.order[m] for m in g.members))
        number = {id(g): i for i, g in enumerate(ordered)}
        groups = tuple(FusionGroup(
            number[id(g)], g.kind,
            tuple(m.name for m in sorted(g.members, key=self.order.__getitem__)),
            tuple(a.name for a in g.anchors), g.solution) for g in ordered)
        decisions = tuple(FusionDecision(subject, action, number[id(group)], reason, benefit)
                          for subject, (action, group, reason, benefit) in self.decisions.items())
        target = self.spec.name if self.spec is not None else \
            f"one on-chip level of {self.capacity:,.0f} bytes"
        return FusionPlan(groups, decisions, target)


def _bytes(tensor: Tensor) -> float:
    return float(tensor.size * tensor.dtype.bytes)

