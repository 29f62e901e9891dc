"""The target conformance suite.

Run it for any installed target with ``pytest --tilecraft-target NAME --pyargs
tilecraft.testing.conformance`` or ``tilecraft conformance NAME``; a plugin package runs it from its
own tests with::

    from tilecraft.testing.conformance import *  # noqa: F403

    @pytest.fixture(scope="module")
    def tilecraft_target_name():
        return "my_target"

It checks: the spec validates and has the core's api_version; the availability it reports is
consistent with its declared capabilities; every declared intrinsic and micro-kernel has a
semantics that is a valid te program; code generation succeeds for the standard operator set
and — where the target can execute or emulate — the results match the reference interpreter.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tilecraft as tc
from tilecraft.target.base import Capability


def _standard_cases() -> list[Any]:
    from tilecraft.ops import catalog

    return list(catalog.standard_set())


@pytest.fixture(scope="module")
def tilecraft_target_name(request: Any) -> str:
    """The target named by --tilecraft-target; plugin test modules override this fixture."""
    name = request.config.getoption("--tilecraft-target", default=None)
    if not name:
        pytest.skip("no target selected: pass --tilecraft-target NAME")
    return name


@pytest.fixture(scope="module")
def conformance_target(tilecraft_target_name: str) -> Any:
    from tilecraft.target.registry import get_target

    return get_target(tilecraft_target_name)


def test_spec_validates_and_round_trips(conformance_target: Any) -> None:
    from tilecraft.target.spec import TARGET_API_VERSION

    spec = conformance_target.spec
    assert spec.api_version == TARGET_API_VERSION
    # a variant ("x86_avx512:znver4") carries the spec of its target
    assert spec.name == conformance_target.name.partition(":")[0]
    again = type(spec).model_validate(spec.model_dump())
    assert again == spec
    assert spec.memory.levels, "a target needs at least one memory level"


def test_availability_is_consistent_with_declared_capabilities(conformance_target: Any) -> None:
    availability = conformance_target.available()
    caps = conformance_target.spec.capabilities
    if availability.execute:
        assert caps.executes_natively, "available() says execute but the spec does not declare it"
    if availability.emulate:
        assert caps.emulates, "available() says emulate but the spec does not declare it"
    for stage in ("codegen", "build", "execute", "emulate"):
        if not getattr(availability, stage) and getattr(caps, _capability_flag(stage), True):
            assert availability.reasons.get(stage), (
                f"stage {stage} is unavailable here but available() gives no reason")


def _capability_flag(stage: str) -> str:
    return {"codegen": "generates_code", "build": "compiles", "execute": "executes_natively",
            "emulate": "emulates"}[stage]


def test_intrinsic_semantics_are_valid_te_programs(conformance_target: Any) -> None:
    for decl in conformance_target.spec.intrinsics:
        program = decl.compute.to_te()
        assert program is not None, f"intrinsic {decl.name} has no te semantics"


def test_micro_kernel_semantics_are_valid_te_programs(conformance_target: Any) -> None:
    for decl in conformance_target.spec.micro_kernels:
        program = decl.to_te()
        assert program is not None, f"micro-kernel {decl.name} has no te semantics"


@pytest.mark.parametrize("case", _standard_cases(), ids=lambda case: case.id)
def test_standard_operator(conformance_target: Any, case: Any) -> None:
    graph, inputs = case.build(np.random.default_rng(7))
    availability = conformance_target.available()
    if not availability.codegen:
        pytest.skip(f"{conformance_target.name} cannot generate code here: "
                    f"{availability.explain()}")
    exe = tc.compile(graph, target=conformance_target)
    for name, source in exe.sources.items():
        assert source.text.strip(), f"empty source for kernel {name}"
    if availability.capability not in (Capability.EXECUTE, Capability.EMULATE):
        return
    got = exe(**inputs)
    expected = tc.reference.run(graph, **inputs)
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for out, ref in zip(got, expected):
        np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64),
                                   rtol=case.rtol, atol=case.atol, err_msg=case.id)
