"""The order dimension of the design space (thesis §3.4.1.1, §3.3.2).

A chain with ``I`` independent loops has ``I!`` block execution orders (24 for a GEMM chain,
not the (3+3)! = 720 of its six operator loops). An order is *legal* when every loop private to
a producer lies inside the loops it shares with later operators (§3.3.2: only the consumer's
reduction loops may sit in the parent block; a producer reduction outside the shared loops
would hand the consumer partial sums).

Data movement depends on an order only through, for each input/output tensor, the set of loops
that reload it (Algorithm 1). :func:`dataflow_classes` enumerates those sets without walking all
``I!`` orders: it builds orders from the innermost loop outwards, places a loop that indexes no
still-unreloaded tensor at once (moving such a loop inwards never adds a reload), and drops
classes whose reload sets contain another class's — they can never move less data, whatever the
tile sizes. Loops that run once (extent 1, or kept whole) go outermost, where they change
nothing.

>>> from tilecraft.fusion.examples import gemm_chain
>>> chain = gemm_chain(256, 256, 256, 256)
>>> len(list(all_orders(chain))), len(legal_orders(chain))
(24, 8)
>>> is_legal(chain, "mlkn"), is_legal(chain, "mkln")
(True, False)
>>> sorted(" ".join(c.order) for c in dataflow_classes(chain))
['l n m k', 'm l k n', 'n m l k']
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tilecraft.fusion.chain import Chain, TensorAccess
from tilecraft.fusion.dataflow import check_order, reload_loops

#: (operator index, tensor) -> loops that reload it
Signature = tuple[tuple[int, str, frozenset[str]], ...]


@dataclass(frozen=True)
class DataflowClass:
    """Orders that move the same data: a representative (outermost first) and, for each input
    and output tensor, the loops that reload it."""

    order: tuple[str, ...]
    signature: Signature

    def reloads(self, tensor: str) -> frozenset[str]:
        return frozenset().union(*(loops for _, name, loops in self.signature
                                   if name == tensor))


def all_orders(chain: Chain) -> Iterator[tuple[str, ...]]:
    """Every order of the chain's independent loops, outermost first (``I!`` of them)."""
    return itertools.permutations(chain.loop_names)


def is_legal(chain: Chain, order: Iterable[str] | str) -> bool:
    """Whether every producer's private loops lie inside the loops it shares with later
    operators (loops that run once are ignored)."""
    position = {loop: i for i, loop in enumerate(check_order(chain, order))}
    once = set(chain.fixed_loops())
    for index in range(len(chain.ops) - 1):
        private = [lp for lp in chain.private_loops(index) if lp not in once]
        shared = [lp for lp in chain.shared_loops(index) if lp not in once]
        if private and shared and min(position[p] for p in private) < \
                max(position[s] for s in shared):
            return False
    return True


def legal_orders(chain: Chain) -> list[tuple[str, ...]]:
    return [order for order in all_orders(chain) if is_legal(chain, order)]


def signature(chain: Chain, order: Iterable[str] | str) -> Signature:
    """The reload sets of ``order`` (over loops that run more than once: one that runs once
    indexes nothing, as in :func:`~tilecraft.fusion.dataflow.analyze`)."""
    once = set(chain.fixed_loops())
    perm = [loop for loop in check_order(chain, order) if loop not in once]
    result = []
    for index, op in enumerate(chain.ops):
        for access in op.accesses:
            if access.io:
                loops = frozenset(reload_loops(access, perm))
                result.append((index, access.tensor, loops))
        private = set(chain.private_loops(index))
        perm = [loop for loop in perm if loop not in private]
    return tuple(result)


def dominates(better: Signature, worse: Signature) -> bool:
    """Whether ``better`` reloads every tensor by a subset of ``worse``'s loops."""
    return all(b[2] <= w[2] for b, w in zip(better, worse))


def dataflow_classes(chain: Chain, legal_only: bool = True,
                     prune_dominated: bool = True) -> list[DataflowClass]:
    """The distinct (and, with ``prune_dominated``, undominated) data-movement structures of
    the chain's orders, each with a representative order."""
    search = _ClassSearch(chain, legal_only)
    search.run()
    classes = [DataflowClass(order, sig) for sig, order in search.found.items()]
    if prune_dominated:
        classes = [c for c in classes
                   if not any(o.signature != c.signature and dominates(o.signature, c.signature)
                              for o in classes)]
    return classes


class _ClassSearch:
    """Depth-first construction of orders from the innermost loop outwards."""

    def __init__(self, chain: Chain, legal_only: bool) -> None:
        self.chain = chain
        once = set(chain.fixed_loops())
        self.once = [lp for lp in chain.loop_names if lp in once]
        self.loops = [lp for lp in chain.loop_names if lp not in once]
        self.legal_only = legal_only
        count = len(chain.ops)
        self.private = [set(chain.private_loops(i)) - once for i in range(count)]
        self.shared = [set(chain.shared_loops(i)) - once if i < count - 1 else set()
                       for i in range(count)]
        erased: set[str] = set()
        self.entries: list[tuple[int, TensorAccess, set[str]]] = []
        self.visible: list[set[str]] = []
        for index, op in enumerate(chain.ops):
            visible = set(self.loops) - erased
            self.visible.append(visible)
            for access in op.accesses:
                if access.io:
                    self.entries.append((index, access, set(access.loops) - once))
            erased |= self.private[index]
        self.found: dict[Signature, tuple[str, ...]] = {}
        self.seen: set[tuple[frozenset[str], frozenset[tuple[int, frozenset[str]]]]] = set()

    def placeable(self, loop: str, placed: set[str]) -> bool:
        if not self.legal_only:
            return True
        return all(self.private[i] <= placed
                   for i, shared in enumerate(self.shared) if loop in shared)

    def run(self) -> None:
        self._visit([], {})

    def _visit(self, placed: list[str], triggered: dict[int, frozenset[str]]) -> None:
        placed_set = set(placed)
        key = (frozenset(placed_set), frozenset(triggered.items()))
        if key in self.seen:
            return
        self.seen.add(key)
        waiting = [e for e in range(len(self.entries)) if e not in triggered]
        if not waiting or len(placed) == len(self.loops):
            self._record(placed, triggered)
            return
        candidates = [lp for lp in self.loops
                      if lp not in placed_set and self.placeable(lp, placed_set)]
        free = [lp for lp in candidates
                if all(lp not in self.entries[e][2] for e in waiting)]
        if free:
            self._visit([*placed, free[0]], triggered)
            return
        before = frozenset(placed_set)
        for loop in candidates:
            fired = {e: before for e in waiting if loop in self.entries[e][2]}
            self._visit([*placed, loop], {**triggered, **fired})

    def _record(self, placed: list[str], triggered: dict[int, frozenset[str]]) -> None:
        inner_to_outer = list(placed)
        # reversed, so that the outer loops read in the chain's loop order
        rest = [lp for lp in reversed(self.loops) if lp not in inner_to_outer]
        while rest:  # finish with any legal completion: reloads no longer change
            placed_set = set(inner_to_outer)
            loop = next((lp for lp in rest if self.placeable(lp, placed_set)), rest[0])
            inner_to_outer.append(loop)
            rest.remove(loop)
        order = tuple(self.once) + tuple(reversed(inner_to_outer))
        sig = []
        for number, (index, access, _) in enumerate(self.entries):
            if number in triggered:
                loops = frozenset(self.visible[index] - triggered[number])
            else:
                loops = frozenset()
            sig.append((index, access.tensor, loops))
        self.found.setdefault(tuple(sig), order)
