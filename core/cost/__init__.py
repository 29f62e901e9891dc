"""Cost models: rank candidates without measuring them all. Every cost model comes through the
``tilecraft_register_cost_models`` hook (the core's are ``DEFAULT_COST_MODELS``, registered by
:mod:`tilecraft.target.builtins`); the AMOS mapping stage of ``tilecraft.compile``
(:mod:`tilecraft.pipeline.mapping`) asks the one named ``cost_model`` (default ``"amos"``) to
rank the mappings of each compute onto each intrinsic, for the report and for deciding which
computes are tensorized — against the target's own estimate of its lowering, or
:mod:`tilecraft.cost.loop_nest`'s of the core's default loop nest.

A mapping cost model has a ``name`` and ``rank(compute, intrinsic, spec, mappings, *,
thorough) -> list[RankedMapping]``: every mapping verified, generated and costed, best first
(:func:`tilecraft.intrin.perfmodel.rank_mappings` is the contract's reference).

>>> [model.name for model in DEFAULT_COST_MODELS]
['amos']
>>> get_cost_model("amos", manager=None).name
'amos'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from tilecraft.errors import TilecraftError

#: the model the AMOS mapping stage uses unless told otherwise
DEFAULT_COST_MODEL = "amos"


class CostModelError(TilecraftError):
    """A cost model is unknown or does not follow the contract."""


@runtime_checkable
class MappingCostModel(Protocol):
    """Ranks the mappings of a compute onto an intrinsic (see the module docstring)."""

    name: str

    def rank(self, compute: Any, intrinsic: Any, spec: Any, mappings: Sequence[Any] | None,
             *, thorough: bool = True) -> list[Any]: ...


class AmosPerformanceModel:
    """AMOS's analytical model (thesis Eq. 5.6-5.8): each mapping's data movement through the
    target's memory levels and its intrinsic calls under the default schedule."""

    name = "amos"

    def rank(self, compute: Any, intrinsic: Any, spec: Any, mappings: Sequence[Any] | None,
             *, thorough: bool = True) -> list[Any]:
        from tilecraft.intrin.perfmodel import rank_mappings

        return rank_mappings(compute, intrinsic, spec, mappings=mappings, thorough=thorough)


#: the core's cost models, registered through the plugin hook
DEFAULT_COST_MODELS: list[MappingCostModel] = [AmosPerformanceModel()]


def get_cost_model(name: str = DEFAULT_COST_MODEL, manager: Any = None) -> MappingCostModel:
    """The cost model registered as ``name`` through the hook of ``manager`` (default: the
    process's plugin manager); a :class:`CostModelError` naming the registered ones if none
    is, or if it has no ``rank`` method."""
    from tilecraft.target.plugins import collect

    models = collect("cost_models", manager)
    model = models.get(name) if isinstance(name, str) else None
    if model is None:
        raise CostModelError(f"unknown cost model {name!r}; the cost models are "
                             f"{', '.join(sorted(models)) or 'none'}")
    if not callable(getattr(model, "rank", None)):
        raise CostModelError(f"cost model {name!r} ({type(model).__name__}) has no rank("
                             "compute, intrinsic, spec, mappings, *, thorough) method; see "
                             "tilecraft.cost.MappingCostModel")
    return model


__all__ = ["DEFAULT_COST_MODEL", "DEFAULT_COST_MODELS", "AmosPerformanceModel", "CostModelError",
           "MappingCostModel", "get_cost_model"]
