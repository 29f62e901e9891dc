"""The schedule space of a contraction on nvidia_tc when AMOS maps it onto the Tensor Cores
(thesis §4.3.2 for the space, §5.5 for the mappings): FlexTensor's typed sub-spaces
(:class:`tilecraft.search.ChoiceSpace`, each with its neighbour moves) over

- ``mapping``: the verified AMOS mappings best ranked per Tensor Core intrinsic of the spec
  (WMMA 16x16x16 / 32x8x16 / 8x32x16 and mma.sync m16n8k16 — so the lowering, WMMA or inline
  PTX, is a choice too), plus ``cuda_cores``: the tiled CUDA-core template instead;
- ``warps`` (``WARPS_M x WARPS_N``), ``fragments`` (``FM x FN``, the §3.4.1.2 outer product),
  ``tc_BK`` and ``tc_stages`` (1, or 2: cp.async double buffering) of the Tensor Core kernel
  (:mod:`tilecraft_nvidia_tc.tensor_cores`);
- ``tile``, ``BK``, ``stages`` of the CUDA-core template
  (:func:`tilecraft.schedule.strategies.gpu_contraction.contraction_template_space`).

A point decodes to a config :meth:`NvidiaTcTarget.lower_compute` takes: the Tensor Core one
(``{"intrinsic", "mapping", "WARPS_M", "WARPS_N", "FM", "FN", "BK", "stages"}``) or the
template's. Where no GPU runs the candidates the target evaluates by its model (the spec's
``evaluation`` is ``estimate`` on such a machine, :func:`evaluated_here`), so ``tilecraft
tune`` searches this space on the predicted times; a config over a limit of the spec is a
LoweringError naming it (the tuner records the candidate as invalid and goes on).

>>> from tilecraft import ops, te
>>> from tilecraft_nvidia_tc.target import NvidiaTcTarget
>>> C = ops.matmul(te.placeholder((64, 48), "float16", name="A"),
...                te.placeholder((48, 40), "float16", name="B"), out_dtype="float32", name="C")
>>> space = tensor_core_space(C, NvidiaTcTarget())
>>> sorted(space.space.names)
['BK', 'fragments', 'mapping', 'stages', 'tc_BK', 'tc_stages', 'tile', 'warps']
>>> sorted({label.split(":")[0] for label in space.space.subspaces["mapping"].values})[:3]
['cuda_cores', 'mma_m16n8k16_f16_f32', 'wmma_m16n16k16_f16_f32']
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.base import Target, TemplateSpace
from tilecraft.target.spec import EvaluationMode, TargetSpec
from tilecraft.te.tensor import Tensor

__all__ = ["CUDA_CORES", "MAPPINGS_PER_INTRINSIC", "evaluated_here", "lower_tensor_core_config",
           "tensor_core_space"]

#: the ``mapping`` value that takes the CUDA-core template instead of a Tensor Core mapping
CUDA_CORES = "cuda_cores"
#: how many of each intrinsic's best-ranked usable mappings the space offers
MAPPINGS_PER_INTRINSIC = 2
WARPS = ((1, 1), (1, 2), (2, 1), (2, 2), (2, 4), (4, 2), (4, 4))
FRAGMENTS = ((1, 1), (1, 2), (2, 1), (2, 2), (2, 4), (4, 2), (4, 4))
SLICES = (16, 32, 64)


@functools.cache
def _gpu_runs_kernels() -> bool:
    from tilecraft_nvidia_tc.availability import machine_availability

    return machine_availability((True, "")).execute


def evaluated_here(spec: TargetSpec) -> TargetSpec:
    """``spec`` as this machine evaluates tuning candidates: by measurement where a GPU runs
    them, by the performance model (``estimate``) where none does."""
    if spec.evaluation is EvaluationMode.ESTIMATE or _gpu_runs_kernels():
        return spec
    return spec.model_copy(update={"evaluation": EvaluationMode.ESTIMATE})


def _mapping_labels(tensor: Tensor, spec: TargetSpec) -> list[str]:
    """``"<intrinsic>:<mapping>"`` for the best usable mappings of each Tensor Core intrinsic
    the kernel lowers (:func:`tilecraft_nvidia_tc.tensor_cores.supports`)."""
    from tilecraft.intrin import match
    from tilecraft.intrin.perfmodel import rank_mappings
    from tilecraft_nvidia_tc.tensor_cores import supports

    labels: list[str] = []
    for decl in spec.intrinsics:
        if decl.compute is None or not supports(decl):
            continue
        found = match(tensor, decl).mappings
        if not found:
            continue
        ranked = rank_mappings(tensor, decl, spec, mappings=found, thorough=False)
        usable = [r for r in ranked if r.usable][:MAPPINGS_PER_INTRINSIC]
        labels.extend(f"{decl.name}:{r.mapping}" for r in usable)
    return labels


def tensor_core_space(tensor: Tensor, target: Target) -> TemplateSpace | None:
    """The space of ``tensor`` (module docstring); ``None`` when no Tensor Core intrinsic of
    the spec maps it."""
    from tilecraft.schedule.strategies.gpu_contraction import contraction_template_space
    from tilecraft.search import ChoiceSpace, Space

    spec = target.spec
    labels = _mapping_labels(tensor, spec)
    if not labels:
        return None
    template = contraction_template_space(tensor, LoweringOptions.from_spec(spec))
    subspaces: list[tuple[str, Any]] = [
        ("mapping", ChoiceSpace(labels + ([CUDA_CORES] if template is not None else []))),
        ("warps", ChoiceSpace(list(WARPS))), ("fragments", ChoiceSpace(list(FRAGMENTS))),
        ("tc_BK", ChoiceSpace(list(SLICES))), ("tc_stages", ChoiceSpace([1, 2]))]
    if template is not None:
        subspaces.extend(template.space.subspaces.items())
    space = Space(subspaces, name="nvidia_tensor_cores")

    def decode(point: Any) -> dict[str, Any]:
        values = space.values(point)
        if values["mapping"] == CUDA_CORES:
            from tilecraft.schedule.strategies.gpu_contraction_tiles import ContractionTiles

            block_m, block_n, thread_m, thread_n = values["tile"]
            return ContractionTiles(block_m, block_n, values["BK"], thread_m, thread_n,
                                    values["stages"]).as_config()
        intrinsic, mapping = values["mapping"].split(":", 1)
        return {"intrinsic": intrinsic, "mapping": mapping, "WARPS_M": values["warps"][0],
                "WARPS_N": values["warps"][1], "FM": values["fragments"][0],
                "FN": values["fragments"][1], "BK": values["tc_BK"],
                "stages": values["tc_stages"]}

    return TemplateSpace(space, decode)


def lower_tensor_core_config(tensor: Tensor, spec: TargetSpec, options: LoweringOptions,
                             config: Mapping[str, Any]) -> list[Kernel]:
    """The Tensor Core kernel of a decoded point (module docstring); a LoweringError naming
    the compute when the intrinsic or mapping is not one of ``tensor``'s, or the tiles are
    over a limit of the spec."""
    from tilecraft.intrin import generate, match
    from tilecraft_nvidia_tc.tensor_cores import WmmaTiles, lower_tensor_core_mapping

    names = {decl.name for decl in spec.intrinsics}
    if config["intrinsic"] not in names:
        raise LoweringError(f"compute {tensor.name}: the config names intrinsic "
                            f"{config['intrinsic']!r}, which {spec.name} does not declare")
    decl = spec.intrinsic(config["intrinsic"])
    found = [m for m in match(tensor, decl).mappings if str(m) == config["mapping"]]
    if not found:
        raise LoweringError(f"compute {tensor.name}: the config's mapping {config['mapping']!r} "
                            f"is not one of its mappings onto {decl.name}; tune it again")
    tiles = WmmaTiles(warps_m=int(config["WARPS_M"]), warps_n=int(config["WARPS_N"]),
                      fm=int(config["FM"]), fn=int(config["FN"]), bk=int(config["BK"]),
                      stages=int(config["stages"]))
    kernels = lower_tensor_core_mapping(tensor, generate(tensor, decl, found[0]), options, tiles)
    if not kernels:
        raise LoweringError(f"compute {tensor.name}: {decl.name} has no Tensor Core lowering")
    return kernels
