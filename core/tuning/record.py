"""One tuning record: which schedule was tried for which workload on which target, and how it
went.

>>> rec = TuningRecord(workload_key="abc", target="x86_avx512", target_options="{}",
...                    hardware="znver5-2c", plugin="tilecraft-x86-avx512",
...                    plugin_version="0.1.0", schedule={"tile": [16, 16]},
...                    costs=(0.002, 0.001, 0.003))
>>> rec.median_cost
0.002
>>> rec.ok
True
"""

from __future__ import annotations

import enum
import hashlib
import json
import statistics
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ErrorKind(str, enum.Enum):
    """Why a candidate produced no valid time."""

    INVALID = "invalid"
    BUILD = "build"
    RUN = "run"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong-result"
    OUT_OF_MEMORY = "out-of-memory"
    #: no machine with the candidate's device is left (a node lost, a device no node has)
    DEVICE_LOST = "device-lost"


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal text (and hashes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def workload_key(description: Any) -> str:
    """A stable hash of a canonical description of an operator (its te statement, shapes and
    dtypes), used to find records of the same workload again."""
    return hashlib.sha256(canonical_json(description).encode()).hexdigest()[:32]


class TuningRecord(BaseModel):
    """A measured (or failed) schedule. ``costs`` are seconds per run; empty when it failed.
    ``estimated``: the costs are a performance model's prediction (a target evaluating in mode
    ``estimate``, e.g. an FPGA whose synthesis takes hours), not a measurement."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload_key: str = Field(min_length=1)
    workload: str = ""
    target: str = Field(min_length=1)
    target_options: str = "{}"
    hardware: str = ""
    plugin: str = ""
    plugin_version: str = ""
    schedule: dict[str, Any]
    costs: tuple[float, ...] = ()
    error_kind: ErrorKind | None = None
    error_message: str = ""
    estimated: bool = False
    timestamp: float = Field(default_factory=time.time)

    @field_validator("costs")
    @classmethod
    def _positive_costs(cls, costs: tuple[float, ...]) -> tuple[float, ...]:
        for cost in costs:
            if not cost > 0:
                raise ValueError(f"cost {cost} is not a positive number of seconds")
        return costs

    @property
    def ok(self) -> bool:
        return self.error_kind is None and bool(self.costs)

    @property
    def median_cost(self) -> float | None:
        return statistics.median(self.costs) if self.ok else None

    def content_hash(self) -> str:
        """Identity of a record for de-duplication when importing or merging."""
        return hashlib.sha256(canonical_json(self.model_dump(mode="json")).encode()).hexdigest()
