"""Loop transformations of a stage: split, fuse, reorder, tile (thesis Eq. 4.2-4.5).

They change which loops a stage has and their order, never what it computes. The examples
print the kernel of a 10-element compute before and after.
"""

from __future__ import annotations

from typing import Any

from tilecraft.schedule.errors import ScheduleError, schedule_error
from tilecraft.schedule.loop import Fuse, Loop, Split
from tilecraft.schedule.stage_base import LoopRef, StageBase, check_positive
from tilecraft.target.spec import SchedulePrimitive


class LoopTransforms(StageBase):
    """split, fuse, reorder and tile."""

    def split(self, loop: LoopRef, factor: int | None = None, nparts: int | None = None,
              names: tuple[str, str] | None = None) -> tuple[Loop, Loop]:
        """Split ``loop`` into ``(outer, inner)`` with ``loop = outer * factor + inner``
        (Eq. 4.2; TVM/Halide ``split``).

        ``factor`` is the inner extent, the outer one is ``ceil(extent / factor)``; or
        ``nparts`` is the outer extent, the inner one ``ceil(extent / nparts)``. When the
        product overshoots the extent, a guard skips the extra iterations. The new loops are
        named ``<name>.outer`` and ``<name>.inner`` unless ``names`` says otherwise.

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((10,), name="A")
        >>> B = te.compute((10,), lambda i: A[i] * 2.0, name="B")
        >>> s = create_schedule(B)
        >>> print(s.lower()[0])
        kernel B(A: float32[10], B: float32[10]) -> (B):
          for i in serial(10):
            B[i] = A[i] * 2.0
        >>> outer, inner = s[B].split(s[B].axes[0], factor=4)
        >>> print(s.lower()[0])
        kernel B(A: float32[10], B: float32[10]) -> (B):
          for i_outer in serial(3):
            for i_inner in serial(4):
              if (((i_outer * 4) + i_inner) < 10):
                B[(i_outer * 4) + i_inner] = A[((i_outer * 4) + i_inner)] * 2.0
        """
        self._require(SchedulePrimitive.SPLIT, "split", self._resolve_soft(loop))
        outer, inner = self._split("split", loop, factor, nparts, names)
        self._record("split", loop=self._name_of(loop), factor=factor, nparts=nparts,
                     names=[outer.name, inner.name])
        return outer, inner

    def fuse(self, *loops: LoopRef, name: str | None = None) -> Loop:
        """Fuse adjacent loops (outer first) into one running over the product of their
        extents (Eq. 4.3; TVM/Halide ``fuse``); each original loop is recomputed with ``//``
        and ``%`` of the fused one.

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((2, 3), name="A")
        >>> B = te.compute((2, 3), lambda i, j: A[i, j] + 1.0, name="B")
        >>> s = create_schedule(B)
        >>> print(s.lower()[0])
        kernel B(A: float32[2, 3], B: float32[2, 3]) -> (B):
          for i in serial(2):
            for j in serial(3):
              B[i, j] = A[i, j] + 1.0
        >>> fused = s[B].fuse(*s[B].axes)
        >>> print(s.lower()[0])
        kernel B(A: float32[2, 3], B: float32[2, 3]) -> (B):
          for i_j_fused in serial(6):
            B[i_j_fused // 3, i_j_fused % 3] = A[(i_j_fused // 3), (i_j_fused % 3)] + 1.0
        """
        first = self._resolve_soft(loops[0]) if loops else None
        self._require(SchedulePrimitive.FUSE, "fuse", first)
        fused = self._fuse("fuse", loops, name)
        self._record("fuse", loops=[self._name_of(loop) for loop in loops], name=fused.name)
        return fused

    def reorder(self, *loops: LoopRef) -> None:
        """Put ``loops`` in this order, in the positions they occupy now (TVM ``reorder``;
        loops not named keep their place).

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((2, 3), name="A")
        >>> B = te.compute((2, 3), lambda i, j: A[i, j] + 1.0, name="B")
        >>> s = create_schedule(B)
        >>> print(s.lower()[0])
        kernel B(A: float32[2, 3], B: float32[2, 3]) -> (B):
          for i in serial(2):
            for j in serial(3):
              B[i, j] = A[i, j] + 1.0
        >>> i, j = s[B].axes
        >>> s[B].reorder(j, i)
        >>> print(s.lower()[0])
        kernel B(A: float32[2, 3], B: float32[2, 3]) -> (B):
          for j in serial(3):
            for i in serial(2):
              B[i, j] = A[i, j] + 1.0
        """
        first = self._resolve_soft(loops[0]) if loops else None
        self._require(SchedulePrimitive.REORDER, "reorder", first)
        self._reorder("reorder", loops)
        self._record("reorder", loops=[self._name_of(loop) for loop in loops])

    def tile(self, x: LoopRef, y: LoopRef, x_factor: int, y_factor: int
             ) -> tuple[Loop, Loop, Loop, Loop]:
        """Tile two loops (Eq. 4.4-4.5): split ``x`` by ``x_factor`` and ``y`` by
        ``y_factor``, then reorder to ``(x.outer, y.outer, x.inner, y.inner)``, which it
        returns (TVM ``tile``).

        >>> from tilecraft import te
        >>> from tilecraft.schedule import create_schedule
        >>> A = te.placeholder((4, 4), name="A")
        >>> B = te.compute((4, 4), lambda i, j: A[j, i], name="B")
        >>> s = create_schedule(B)
        >>> print(s.lower()[0])
        kernel B(A: float32[4, 4], B: float32[4, 4]) -> (B):
          for i in serial(4):
            for j in serial(4):
              B[i, j] = A[j, i]
        >>> xo, yo, xi, yi = s[B].tile(*s[B].axes, 2, 2)
        >>> print(s.lower()[0])
        kernel B(A: float32[4, 4], B: float32[4, 4]) -> (B):
          for i_outer in serial(2):
            for j_outer in serial(2):
              for i_inner in serial(2):
                for j_inner in serial(2):
                  B[(i_outer * 2) + i_inner, (j_outer * 2) + j_inner]
                    = A[((j_outer * 2) + j_inner), ((i_outer * 2) + i_inner)]
        """
        self._require(SchedulePrimitive.TILE, "tile", self._resolve_soft(x))
        x_name, y_name = self._name_of(x), self._name_of(y)
        x_loop, y_loop = self._leaf("tile", x), self._leaf("tile", y)
        if x_loop is y_loop:
            raise schedule_error("tile", self.name, x_loop.name, "tile needs two different "
                                 "loops; use split for one")
        xo, xi = self._split("tile", x_loop, x_factor, None, None)
        yo, yi = self._split("tile", y_loop, y_factor, None, None)
        self._reorder("tile", (xo, yo, xi, yi))
        self._record("tile", x=x_name, y=y_name, x_factor=x_factor, y_factor=y_factor)
        return xo, yo, xi, yi

    # implementations (no target check, no trace) -----------------------------------------
    def _resolve_soft(self, ref: Any) -> Loop | None:
        try:
            return self._resolve("lookup", ref)
        except ScheduleError:  # the primitive itself reports the bad reference
            return None

    @staticmethod
    def _name_of(ref: LoopRef) -> str:
        return ref if isinstance(ref, str) else getattr(ref, "name", repr(ref))

    def _split(self, verb: str, ref: LoopRef, factor: int | None, nparts: int | None,
               names: tuple[str, str] | None) -> tuple[Loop, Loop]:
        loop = self._leaf(verb, ref)
        if (factor is None) == (nparts is None):
            raise schedule_error(verb, self.name, loop.name, "give exactly one of factor= "
                                 "(the inner extent) and nparts= (the outer extent)")
        if factor is not None:
            check_positive(verb, self.name, loop.name, "factor", factor)
        else:
            check_positive(verb, self.name, loop.name, "nparts", nparts)
        self._unannotated(verb, [loop])
        if names is None:
            names = (f"{loop.name}.outer", f"{loop.name}.inner")
        if len(names) != 2 or names[0] == names[1]:
            raise schedule_error(verb, self.name, loop.name, f"names {names!r} must be two "
                                 "different loop names (outer, inner)")
        relation = Split(loop, loop, loop, factor, nparts)
        outer_extent, inner_extent = relation.extents(loop.extent)
        outer = self._new_loop(verb, names[0], outer_extent, loop.kind)
        inner = self._new_loop(verb, names[1], inner_extent, loop.kind)
        self.relations.append(Split(loop, outer, inner, factor, nparts))
        position = self.leaves.index(loop)
        self.leaves[position:position + 1] = [outer, inner]
        return outer, inner

    def _fuse(self, verb: str, refs: tuple[LoopRef, ...], name: str | None) -> Loop:
        if len(refs) < 2:
            raise schedule_error(verb, self.name, None, "fuse needs at least two adjacent "
                                 "loops (outer first)")
        loops = [self._leaf(verb, ref) for ref in refs]
        if len(set(loops)) != len(loops):
            raise schedule_error(verb, self.name, loops[0].name, "a loop is named twice")
        kinds = {loop.kind for loop in loops}
        if len(kinds) > 1:
            raise schedule_error(verb, self.name, loops[0].name, "cannot fuse spatial and "
                                 "reduce loops: fuse loops of one kind")
        positions = [self.leaves.index(loop) for loop in loops]
        if positions != list(range(positions[0], positions[0] + len(loops))):
            order = ", ".join(loop.name for loop in self.leaves)
            raise schedule_error(verb, self.name, loops[0].name, f"the loops "
                                 f"{', '.join(loop.name for loop in loops)} are not adjacent "
                                 f"outer-to-inner in the nest ({order}); reorder them next to "
                                 "each other first")
        self._unannotated(verb, loops)
        extent = 1
        for loop in loops:
            extent *= loop.extent
        fused_name = name or ".".join(loop.name for loop in loops) + ".fused"
        fused = self._new_loop(verb, fused_name, extent, loops[0].kind)
        self.relations.append(Fuse(tuple(loops), fused))
        self.leaves[positions[0]:positions[-1] + 1] = [fused]
        return fused

    def _reorder(self, verb: str, refs: tuple[LoopRef, ...]) -> None:
        if not refs:
            raise schedule_error(verb, self.name, None, "name the loops to reorder")
        loops = [self._leaf(verb, ref) for ref in refs]
        if len(set(loops)) != len(loops):
            twice = next(loop for loop in loops if loops.count(loop) > 1)
            raise schedule_error(verb, self.name, twice.name, "the loop is named twice; name "
                                 "each loop once")
        positions = sorted(self.leaves.index(loop) for loop in loops)
        for position, loop in zip(positions, loops):
            self.leaves[position] = loop


__all__ = ["LoopTransforms"]
