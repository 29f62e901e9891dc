"""The Target protocol: what a plugin hands the core (the plugin contract; the README's "Writing
a target plugin" shows the scaffold).

A target is data (its :class:`~tilecraft.target.spec.TargetSpec`) plus named stages, each
producing the next stage's input, like Triton's backends:

``codegen(kernel) -> Source``, ``build(source) -> Artifact``, ``load(artifact) -> KernelFunction``,
or ``emulate(kernel, arrays)`` where it cannot run natively (``emulator(kernel, source)`` gives
the function that runs then: the Kernel IR emulated by default, or the target's own source),
and ``estimate(kernel) -> Estimate`` where it models instead of measures. ``available()`` says
which stages this machine can do, and why not.

Two optional hooks: ``variants()`` / ``with_variant(name)`` give the same target for a named
variant (``get_target("x86_avx512:znver4")``: a CPU, a chip generation); a target without
variants refuses one. ``export(kernels, graph, directory, name)`` writes what running the
compiled kernels without tilecraft needs (e.g. a shared library and a C header); ``tilecraft
compile --output-dir`` calls it, and a target without it writes only its sources.
``probe()`` measures the machine's figures again (``tilecraft targets --probe``); a target
with nothing to measure returns none.

>>> Availability(codegen=True, build=True, execute=False, emulate=True,
...              reasons={"execute": "no GPU"}).capability.value
'emulate'
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from tilecraft.errors import TargetError

if TYPE_CHECKING:
    from tilecraft.graph import Graph
    from tilecraft.kernel_ir.nodes import Kernel
    from tilecraft.lower.options import LoweringOptions
    from tilecraft.target.spec import TargetSpec
    from tilecraft.te.tensor import Tensor


class Capability(str, enum.Enum):
    """What this machine can do with a target, best first."""

    EXECUTE = "execute"
    EMULATE = "emulate"
    COMPILE_ONLY = "compile only"
    MODEL_ONLY = "model only"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class Availability:
    """Which stages work on this machine; ``reasons`` explains each one that does not."""

    codegen: bool
    build: bool
    execute: bool
    emulate: bool = False
    estimate: bool = False
    reasons: Mapping[str, str] = field(default_factory=dict)

    @property
    def capability(self) -> Capability:
        if self.execute:
            return Capability.EXECUTE
        if self.emulate:
            return Capability.EMULATE
        if self.build:
            return Capability.COMPILE_ONLY
        if self.estimate:
            return Capability.MODEL_ONLY
        return Capability.UNAVAILABLE

    def explain(self) -> str:
        """One line: the capability and why the better ones are missing."""
        why = "; ".join(f"{stage}: {reason}" for stage, reason in self.reasons.items())
        return f"{self.capability.value}" + (f" ({why})" if why else "")


@dataclass(frozen=True)
class Source:
    """Generated code for one kernel. ``suffix`` is the file suffix its code generator gives
    it (``"ll"``, ``"cu"``, ``"cl"``); without one, the language names the file.

    >>> Source("toy", "k", "opencl", "", "k", suffix="cl").file_name
    'k.cl'
    >>> Source("toy", "k", "text", "", "k").file_name
    'k.text'
    """

    target: str
    kernel_name: str
    language: str
    text: str
    entry: str
    meta: Mapping[str, Any] = field(default_factory=dict)
    suffix: str = ""

    @property
    def file_suffix(self) -> str:
        return (self.suffix or self.language).lstrip(".")

    @property
    def file_name(self) -> str:
        return f"{self.kernel_name}.{self.file_suffix}"


@dataclass(frozen=True)
class Artifact:
    """A built kernel: a file (object, shared library, binary) and/or an in-memory handle."""

    target: str
    kernel_name: str
    path: Path | None = None
    handle: Any = None
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Estimate:
    """A modelled cost of a kernel."""

    seconds: float
    detail: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class LoweringEstimate:
    """How a compute would be lowered without an AMOS mapping — ``strategy`` (the target's
    template, the core's lowering) — and the predicted ``seconds`` (``None``: not
    estimated; the strategy already uses the target's intrinsics), with the ``basis`` of the
    figure, for the mapping stage's report (:mod:`tilecraft.intrin.decision`)."""

    strategy: str
    seconds: float | None
    basis: str = ""


class KernelFunction(Protocol):
    """A loaded kernel: call it with every parameter of the kernel by name (C-contiguous
    arrays of the declared shape and dtype); it writes its outputs in place."""

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> None: ...


@dataclass(frozen=True)
class FusedGroup:
    """Computes (by name, in topological order) lowered together into ``kernels``; ``notes``
    say what was decided and why (they go into the Executable's report). ``tunable`` names
    the group's compute whose template parameters tuning searches (a GEMM with its epilogue
    fused in), where the group's kernels take only the template's defaults: where tuning or
    the database gives that compute parameters — or a compile overlaps tuning with calls —
    the pipeline leaves the group apart, so the tuned kernels run (``""``: none)."""

    computes: tuple[str, ...]
    kernels: tuple[Kernel, ...]
    notes: tuple[str, ...] = ()
    tunable: str = ""


@dataclass(frozen=True)
class TemplateSpace:
    """A schedule template's search space: ``space`` (a :class:`tilecraft.search.Space`) and
    ``decode(point) -> config`` giving the ``config`` :meth:`Target.lower_compute` takes."""

    space: Any
    decode: Callable[[Any], dict[str, Any]]


class Target(ABC):
    """Base class of every target plugin's target object."""

    @property
    @abstractmethod
    def spec(self) -> TargetSpec:
        """The validated, versioned description of the chip."""

    @property
    def name(self) -> str:
        return self.spec.name

    @abstractmethod
    def available(self) -> Availability:
        """Which stages this machine can run, and why not."""

    @abstractmethod
    def codegen(self, kernel: Kernel) -> Source:
        """Kernel IR to source text; reject constructs the target cannot express with a
        :class:`~tilecraft.errors.CodegenError` naming the construct."""

    def build(self, source: Source) -> Artifact:
        raise TargetError(f"target {self.name} cannot build code on this machine: "
                          f"{self.available().reasons.get('build', 'no build stage')}")

    def load(self, artifact: Artifact) -> KernelFunction:
        raise TargetError(f"target {self.name} cannot execute on this machine: "
                          f"{self.available().reasons.get('execute', 'no load stage')}")

    def emulate(self, kernel: Kernel, arrays: Mapping[str, np.ndarray]) -> None:
        """Run ``kernel`` without the hardware (the core's Kernel IR interpreter by default;
        intrinsic and micro-kernel calls run their declared semantics)."""
        from tilecraft.kernel_ir.interpreter import run_kernel

        run_kernel(kernel, arrays, self.spec.reference_semantics())

    def emulator(self, kernel: Kernel, source: Source) -> KernelFunction:
        """How ``kernel`` runs without the hardware, given its generated ``source``: a target
        that emulates its own source (e.g. CUDA C compiled for the host against an emulation
        header) returns a function running it; by default :meth:`emulate` on the Kernel IR."""
        return lambda arrays: self.emulate(kernel, arrays)

    def estimate(self, kernel: Kernel) -> Estimate:
        raise TargetError(f"target {self.name} has no performance model")

    def fuse(self, graph: Graph, options: LoweringOptions,
             plan: Any = None) -> list[FusedGroup]:
        """Groups of computes of ``graph`` the target lowers together (thesis ch. 3), each
        with its kernels; computes in no group are lowered one by one. ``plan`` is Chimera's
        :class:`~tilecraft.fusion.FusionPlan` (``None`` when there is nothing to chain): the
        target lowers the planned chains its kernels can express, with the plan's tiles, and
        returns a note-only group (no computes) saying why for each one it leaves apart.
        Default: none."""
        return []

    def native_lowering(self, tensor: Tensor,
                        options: LoweringOptions) -> LoweringEstimate | None:
        """The target's own lowering of ``tensor`` (what :meth:`lower_compute` would do with
        it) and its predicted time, which the AMOS mapping stage weighs against the best
        mapping of ``tensor`` onto the target's intrinsics; ``seconds=None`` says the lowering
        already uses those instructions (no mapping replaces it). Default: ``None``, no
        strategy of its own — the mapping is weighed against the core's lowering
        (:mod:`tilecraft.cost.loop_nest`)."""
        return None

    def template_space(self, tensor: Tensor) -> TemplateSpace | None:
        """The tunable parameters of the target's schedule template for ``tensor`` (thesis
        §4.5: the template's free parameters are what the search tunes), or ``None`` when the
        target has no template for it."""
        return None

    def lower_compute(self, tensor: Tensor, options: LoweringOptions,
                      config: Mapping[str, Any] | None = None) -> list[Kernel] | None:
        """The target's schedule template for ``tensor`` (thesis §4.5): the kernels computing
        it, in order, or ``None`` to use the core's lowering. ``config`` holds the template's
        tunable parameters (``None``: the target's own choice). Kernels may write workspace
        outputs that are not graph tensors (the runtime allocates them) and may view a graph
        tensor in another shape of the same size."""
        return None

    def lower_mapped(self, compute: Tensor, physical: Any,
                     options: LoweringOptions) -> list[Kernel] | None:
        """The target's own kernels for ``compute`` tensorized through the verified AMOS
        mapping ``physical`` (a :class:`~tilecraft.intrin.generation.PhysicalMapping` onto one
        of its intrinsics; thesis §5.4), or ``None`` for the core's serial loop nest of
        intrinsic calls (:func:`~tilecraft.intrin.lowering.lower_mapped`). A GPU target binds
        the outer loops to its threads here, for instance."""
        return None

    # optional hooks: variants and ahead-of-time export ---------------------------------------
    def variants(self) -> Mapping[str, str]:
        """The variants ``with_variant`` accepts, each with a one-line description (none by
        default)."""
        return {}

    def with_variant(self, variant: str) -> Target:
        """This target for ``variant`` (``get_target(f"{name}:{variant}")``); a TargetError
        naming the known variants when there is no such one."""
        known = ", ".join(sorted(self.variants()))
        if not known:
            raise TargetError(f"target {self.name} has no variants, so {self.name}:{variant} "
                              f"names nothing; use target {self.name!r}")
        raise TargetError(f"target {self.name} has no variant {variant!r}; its variants are "
                          f"{known}")

    def export(self, kernels: Sequence[tuple[Kernel, Source]], graph: Graph,
               directory: Path, name: str) -> list[Path]:
        """Ahead of time: write into ``directory`` what calling ``kernels`` (in this order:
        they compute ``graph``) without tilecraft needs, with ``name`` as the file stem, and
        return the paths written. Default: nothing beyond the sources the caller writes."""
        return []

    def probe(self) -> dict[str, str]:
        """Measure this machine's figures again (peak rates, bandwidths), replacing any cached
        ones, so that the spec uses them from now on; return them as name -> value with its
        unit, for ``tilecraft targets --probe``. Default: nothing to measure, ``{}``."""
        return {}

    def __repr__(self) -> str:
        return f"<Target {self.name}>"
