"""Lockstep execution of the threads of BOUND loops whose body synchronises.

A BOUND loop whose body holds a :class:`~tilecraft.kernel_ir.nodes.Barrier` or a
:class:`~tilecraft.kernel_ir.concurrency.SubgroupReduce` runs all its threads together,
statement by statement (:class:`Lockstep`, a visitor building closures over the list of thread
environments): every thread reaches a barrier before any passes it, and a subgroup reduction
sees the values of all its lanes. Statements without synchronisation run thread after thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.concurrency import Pipeline, SubgroupReduce
from tilecraft.kernel_ir.interpreter_expr import Env, allocation_fill, combine_fn
from tilecraft.kernel_ir.nodes import Allocate, Barrier, For, IfThenElse, LoopKind, Seq, Stmt
from tilecraft.kernel_ir.visitor import KernelVisitor, walk_stmts

LockstepFn = Callable[[list[Env]], None]

__all__ = ["Lockstep", "LockstepFn", "contains_sync"]


def contains_sync(stmt: Stmt) -> bool:
    """Whether threads must run ``stmt`` in lockstep (a barrier or subgroup reduction)."""
    return any(isinstance(s, (Barrier, SubgroupReduce)) for s in walk_stmts(stmt))


class Lockstep(KernelVisitor[LockstepFn]):
    """Closures running a statement over every thread environment (module docstring);
    ``compiled`` is the :class:`~tilecraft.kernel_ir.interpreter.InterpretedKernel`."""

    def __init__(self, compiled: Any, enclosing: tuple[int, ...] = ()) -> None:
        self.compiled = compiled
        self.exprs = compiled._exprs
        self.kernel = compiled.kernel.name
        #: the slots of the loop variables around the statement being compiled, from the
        #: bound loop that started lockstep execution inwards (others may hold stale values)
        self.enclosing = list(enclosing)

    def visit(self, stmt: Stmt, *args: Any) -> LockstepFn:
        if isinstance(stmt, SubgroupReduce) or contains_sync(stmt) \
                and not isinstance(stmt, Barrier):
            return super().visit(stmt, *args)
        single = self.compiled._stmt(stmt)

        def each(threads: list[Env]) -> None:
            for env in threads:
                single(env)

        return each

    def generic_visit(self, stmt: Stmt, *args: Any) -> LockstepFn:
        raise LoweringError(f"kernel {self.kernel}: a barrier inside {type(stmt).__name__} "
                            "cannot run in lockstep; move it out of that statement")

    def visit_Seq(self, stmt: Seq) -> LockstepFn:
        parts = [self.visit(s) for s in stmt.stmts]

        def seq_all(threads: list[Env]) -> None:
            for part in parts:
                part(threads)

        return seq_all

    def visit_Allocate(self, alloc: Allocate) -> LockstepFn:
        slot = self.exprs.bind_buffer(alloc.buffer)
        guard = self.exprs.load_guards.get(id(alloc.buffer))
        body = self.visit(alloc.body)
        shape, dtype = alloc.buffer.storage_shape, alloc.buffer.dtype.numpy

        fill = allocation_fill(alloc)

        def allocate_all(threads: list[Env]) -> None:
            for env in threads:
                env[slot] = np.full(shape, fill, dtype)
                if guard is not None:
                    env[guard] = np.zeros(shape, bool)
            body(threads)

        return allocate_all

    def visit_IfThenElse(self, branch: IfThenElse) -> LockstepFn:
        cond = self.exprs.compile(branch.cond)
        then_body = self.visit(branch.then_body)
        else_body = self.visit(branch.else_body) if branch.else_body is not None else None
        kernel = self.kernel

        def if_all(threads: list[Env]) -> None:
            taken = {bool(cond(env)) for env in threads}
            if len(taken) > 1:
                raise LoweringError(
                    f"kernel {kernel}: a barrier sits under `if {branch.cond}`, which differs "
                    "between threads; every thread must reach the same barriers (move the "
                    "barrier out of the condition)")
            if True in taken:
                then_body(threads)
            elif else_body is not None:
                else_body(threads)

        return if_all

    def visit_For(self, loop: For) -> LockstepFn:
        extent = self.exprs.compile(loop.extent)
        slot = self.exprs.bind_var(loop.var)
        self.enclosing.append(slot)
        body = self.visit(loop.body)
        self.enclosing.pop()
        kernel = self.kernel
        if loop.kind is LoopKind.BOUND:
            fork, join = self.compiled._fork_threads, self.compiled._join_threads

            def spawn_all(threads: list[Env]) -> None:
                inner = []
                for env in threads:
                    for value in range(int(extent(env))):
                        thread = list(env)
                        thread[slot] = value
                        inner.append(thread)
                fork(inner)
                body(inner)
                join(inner)

            return spawn_all

        def loop_all(threads: list[Env]) -> None:
            counts = {int(extent(env)) for env in threads}
            if len(counts) > 1:
                raise LoweringError(
                    f"kernel {kernel}: loop {loop.var.name} contains a barrier but its extent "
                    f"{loop.extent} differs between threads; make the trip count uniform")
            for value in range(counts.pop() if counts else 0):
                for env in threads:
                    env[slot] = value
                body(threads)

        return loop_all

    def visit_Pipeline(self, stmt: Pipeline) -> LockstepFn:
        """The pipelined schedule of the stages (see the interpreter), each stage over every
        thread."""
        extent = self.exprs.compile(stmt.extent)
        slot = self.exprs.bind_var(stmt.var)
        self.enclosing.append(slot)
        stages = [self.visit(stage) for stage in stmt.stages]
        self.enclosing.pop()
        kernel = self.kernel

        def pipeline_all(threads: list[Env]) -> None:
            counts = {int(extent(env)) for env in threads}
            if len(counts) > 1:
                raise LoweringError(f"kernel {kernel}: pipeline {stmt.var.name} contains a "
                                    "barrier but its extent differs between threads")
            total = counts.pop() if counts else 0
            for step in range(total + len(stages) - 1):
                for number, stage in enumerate(stages):
                    if 0 <= step - number < total:
                        for env in threads:
                            env[slot] = step - number
                        stage(threads)

        return pipeline_all

    def visit_SubgroupReduce(self, stmt: SubgroupReduce) -> LockstepFn:
        slot = self.exprs.buffer_slot(stmt.buffer, stmt)
        index = self.exprs.index(stmt.buffer, stmt.indices,
                                 f"subgroup reduce into {stmt.buffer.name}")
        value = self.exprs.compile(stmt.value)
        lane = self.exprs.bind_var(stmt.lane)
        # threads differ only in the variables of the loops around the reduction (a
        # variable of an earlier sibling loop may hold a stale value, even an array)
        others = [s for s in self.enclosing if s != lane]
        combine = combine_fn(stmt.op, stmt.value.dtype)
        width = stmt.width

        def reduce_all(threads: list[Env]) -> None:
            groups: dict[tuple[Any, ...], list[Env]] = {}
            for env in threads:
                key = tuple(env[s] for s in others) + (env[lane] // width,)
                groups.setdefault(key, []).append(env)
            for members in groups.values():
                members.sort(key=lambda env: env[lane])
                total = None
                for env in members:
                    total = value(env) if total is None else combine(total, value(env))
                for env in members:
                    env[slot][index(env)] = total

        return reduce_all
