"""Building a Kernel IR loop nest from a stage's leaf loops, with guards and attach points.

:func:`build_nest` opens one ``For`` per leaf (none for a leaf of one iteration: its variable
is 0), places each guard just inside the innermost loop it depends on (so that a guard on
outer loops does not sit in an inner, vectorised loop), runs the statements of stages attached
at a leaf first in its body (inside its guards, in their local buffers), and asks
``innermost`` for the statement at the bottom.

>>> from tilecraft.kernel_ir.nodes import LoopKind
>>> from tilecraft.schedule.loop import Loop, LoopAnnotation
>>> from tilecraft.te import Var
>>> from tilecraft.te.expr import AxisKind
>>> from tilecraft.kernel_ir.nodes import Barrier
>>> o, n = Var("o"), Var("n")
>>> leaves = [Leaf(Loop("o", 3, "S"), o, 3, LoopAnnotation()),
...           Leaf(Loop("n", 4, "S"), n, 4, LoopAnnotation(LoopKind.VECTOR), lanes=4)]
>>> guard = Guard(o * 4 + n < 10, AxisKind.SPATIAL, "i")
>>> print(build_nest(leaves, [guard], Scope(), no_attach, lambda scope, rest: Barrier()))
for o in serial(3):
  for n in vector(4, lanes=4):
    if (((o * 4) + n) < 10):
      barrier(block)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tilecraft.kernel_ir.nodes import Allocate, Buffer, For, IfThenElse, LoopKind, Seq, Stmt
from tilecraft.schedule.loop import Guard, Loop, LoopAnnotation
from tilecraft.te.bounds import Affine, facts_from_condition
from tilecraft.te.expr import Expr, LogicalOp, Var, const, logical


@dataclass(frozen=True)
class Leaf:
    """A leaf loop as lowered: its variable (None for one iteration), extent, annotation and
    resolved ``lanes`` (vector lanes or unroll factor)."""

    loop: Loop
    var: Var | None
    extent: int
    annotation: LoopAnnotation
    lanes: int = 0

    @property
    def value(self) -> Expr:
        """The loop's value in index expressions: 0 for one iteration (a bound loop of one
        thread keeps its variable, unused)."""
        return self.var if self.var is not None and self.extent > 1 else const(0)

    @property
    def kind(self) -> LoopKind:
        return self.annotation.kind

    def wrap(self, body: Stmt) -> Stmt:
        if self.var is None:
            return body
        annotation = self.annotation
        return For(self.var, const(self.extent), annotation.kind, body, lanes=self.lanes,
                   axis=annotation.axis, initiation_interval=annotation.initiation_interval)


@dataclass(frozen=True)
class Scope:
    """What holds at a point of the nest: the variables bound and the facts of the guards
    around it (as ``f >= 0`` affine facts for bound analysis)."""

    bound: frozenset[Var] = frozenset()
    facts: tuple[Affine, ...] = field(default=())

    def bind(self, var: Var | None) -> Scope:
        if var is None:
            return self
        return Scope(self.bound | {var}, self.facts)

    def guarded(self, guards: Sequence[Guard]) -> Scope:
        facts = list(self.facts)
        for guard in guards:
            facts.extend(facts_from_condition(guard.cond, True))
        return Scope(self.bound, tuple(facts))


#: at_leaf(position, scope) -> (buffers to allocate, statements to run first) at that leaf
AttachFn = Callable[[int, Scope], tuple[list[Buffer], list[Stmt]]]
#: innermost(scope, guards not yet placed) -> the statement at the bottom of the nest
InnermostFn = Callable[[Scope, list[Guard]], Stmt]


def no_attach(position: int, scope: Scope) -> tuple[list[Buffer], list[Stmt]]:
    return [], []


def seq(stmts: Sequence[Stmt]) -> Stmt:
    """One statement for ``stmts``, flattening nested sequences."""
    flat: list[Stmt] = []
    for stmt in stmts:
        if isinstance(stmt, Seq):
            flat.extend(stmt.stmts)
        else:
            flat.append(stmt)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def guard_with(guards: Sequence[Guard], body: Stmt) -> Stmt:
    if not guards:
        return body
    cond = guards[0].cond
    for guard in guards[1:]:
        cond = logical(LogicalOp.AND, cond, guard.cond)
    return IfThenElse(cond, body)


def _split_ready(guards: Sequence[Guard], bound: frozenset[Var]) -> tuple[list[Guard],
                                                                         list[Guard]]:
    ready = [g for g in guards if g.variables <= bound]
    return ready, [g for g in guards if not g.variables <= bound]


def build_nest(leaves: Sequence[Leaf], guards: Sequence[Guard], scope: Scope,
               at_leaf: AttachFn, innermost: InnermostFn) -> Stmt:
    """The nest of ``leaves`` (outermost first) around ``innermost`` (module docstring)."""
    ready, pending = _split_ready(guards, scope.bound)
    scope = scope.guarded(ready)

    def descend(position: int, scope: Scope, pending: list[Guard]) -> Stmt:
        if position == len(leaves):
            return innermost(scope, pending)
        leaf = leaves[position]
        scope = scope.bind(leaf.var)
        placed, pending = _split_ready(pending, scope.bound)
        scope = scope.guarded(placed)
        buffers, first = at_leaf(position, scope)
        body = guard_with(placed, seq([*first, descend(position + 1, scope, pending)]))
        for buffer in reversed(buffers):
            body = Allocate(buffer, body)
        return leaf.wrap(body)

    return guard_with(ready, descend(0, scope, pending))


__all__ = ["AttachFn", "InnermostFn", "Leaf", "Scope", "build_nest", "guard_with",
           "no_attach", "seq"]
