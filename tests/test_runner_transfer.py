"""Build here, measure there: a built candidate is plain data (bytes, picklable artifacts) that
a runner ships to the device node, where it is loaded, checked and timed without building.
No Ray needed: the two halves run in this process, the candidate pickled in between."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest

from tilecraft.target.registry import get_target
from tilecraft.tuning import ErrorKind, MeasureInput, MeasureResult, MeasureSettings, Workload
from tilecraft.tuning.candidate import evaluate_in_process
from tilecraft.tuning.runners.transfer import (
    ROLE_COUNTS,
    BuiltCandidate,
    build_candidate,
    measure_built,
)
from tilecraft.tuning.workload import resolve_reference

HELPERS = Path(__file__).with_name("tuning_candidates.py")
helpers = sys.modules[resolve_reference(f"{HELPERS}:ref").__module__]
SETTINGS = MeasureSettings(warmup=0, repeats=2, min_seconds=0.0005, timeout_s=5.0)


def _travel(built: BuiltCandidate) -> BuiltCandidate:
    return pickle.loads(pickle.dumps(built))  # what Ray's object store does to it


def _misbehaving(mode: object, size: int = 37) -> MeasureInput:
    return MeasureInput(Workload(helpers.ref("scaled"), (size,), name=f"scaled{size}"),
                        helpers.ref("measuring_target"), mode,
                        builder=helpers.ref("misbehaving_builder"))


@pytest.mark.parametrize("size", [1, 37])
def test_a_picklable_artifact_travels_and_is_measured_without_building(size):
    built = build_candidate(_misbehaving(None, size), SETTINGS)
    assert isinstance(built, BuiltCandidate) and built.how == "artifact"
    before = ROLE_COUNTS.copy()
    result = measure_built(_travel(built), SETTINGS)
    assert result.ok and result.max_abs_error == 0.0 and result.flops == built.flops
    assert ROLE_COUNTS["measure"] == before["measure"] + 1
    assert ROLE_COUNTS["build"] == before["build"]  # measuring built nothing
    assert ROLE_COUNTS["device-build"] == before["device-build"]


def test_a_wrong_result_is_found_on_the_measuring_side():
    built = build_candidate(_misbehaving("wrong"), SETTINGS)
    result = measure_built(_travel(built), SETTINGS)
    assert result.error_kind is ErrorKind.WRONG_RESULT and "differ" in result.error_message
    assert result.max_abs_error == pytest.approx(1.0)


@pytest.mark.parametrize(("mode", "kind"), [("codegen-raise", ErrorKind.BUILD),
                                            ("lower-raise", ErrorKind.INVALID)])
def test_build_failures_come_back_typed_from_the_build_side(mode, kind):
    result = build_candidate(_misbehaving(mode), SETTINGS)
    assert isinstance(result, MeasureResult) and result.error_kind is kind and result.node


@pytest.mark.skipif(not get_target("x86_avx512").available().execute,
                    reason="this host cannot run AVX-512 code")
def test_x86_code_travels_as_shared_library_bytes_and_matches_the_reference():
    candidate = MeasureInput(Workload.from_catalog("relu[13x17]"), "x86_avx512")
    built = build_candidate(candidate, SETTINGS)
    assert isinstance(built, BuiltCandidate) and built.how == "export"
    library = next(iter(built.files))
    assert library.endswith(".so") and built.files[library][:4] == b"\x7fELF"
    assert built.size_bytes > 0 and not built.artifacts  # bytes, no path, no JIT handle
    result = measure_built(_travel(built), SETTINGS)
    local = evaluate_in_process(candidate, SETTINGS)
    assert result.ok and local.ok and result.max_abs_error == local.max_abs_error == 0.0
