"""Random tensor programs compiled for the host CPU and compared with the reference interpreter.

The programs come from :mod:`tilecraft.testing.random_programs` (families, tolerances and the
seeded API are documented there): elementwise float trees with broadcasting, guards and
floor-mod indices; integer arithmetic that wraps; reductions over several axes; layout and
floordiv/mod index maps; cast chains; library operators with random shapes and parameters
(convolutions with stride, dilation and groups, pooling, softmax, layer norm); GEMM and
convolution chains the x86 plugin fuses (checked in ``exe.report``); int8 and bfloat16
contractions on VNNI / AVX512-BF16 (checked in the generated code; skipped where the CPU lacks
the feature).

Default run: 200 programs, a quota per family (``QUOTA``), the same ones every run (hypothesis
``derandomize``); ``make test-slow``: 2000 more. ``TILECRAFT_FUZZ_SEED=N`` draws other programs
(a failure prints the program; hypothesis shrinks it first). Compiled executables are cached by
program text, so a program hypothesis draws twice (while shrinking, or a small one) compiles
once.
"""

from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings

import tilecraft as tc
from tilecraft.testing.random_programs import (
    TENSORIZED,
    RandomProgram,
    family_names,
    programs,
    random_program,
)

INTRINSIC = {"int8_gemm": ("avx512_vnni", "vpdpbusd"), "bf16_gemm": ("avx512_bf16", "dpbf16ps")}
_SEED = os.environ.get("TILECRAFT_FUZZ_SEED")


def _settings(examples: int):
    """hypothesis settings: deterministic unless TILECRAFT_FUZZ_SEED is set."""
    chosen = settings(max_examples=examples, deadline=None, derandomize=_SEED is None,
                      database=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

    def decorate(test):
        test = chosen(test)
        return seed(int(_SEED))(test) if _SEED is not None else test

    return decorate


@pytest.fixture(scope="module")
def host_flags() -> frozenset[str]:
    from tilecraft_x86_avx512.host import read_cpuinfo

    from tilecraft.target.registry import get_target

    availability = get_target("x86_avx512").available()
    if not availability.execute:
        pytest.skip(f"x86_avx512 cannot execute here: {availability.explain()}")
    return read_cpuinfo()[1] & {feature for feature, _ in INTRINSIC.values()}


_COMPILED: OrderedDict[str, tc.Executable] = OrderedDict()


def _compile(program: RandomProgram) -> tc.Executable:
    """The program compiled for x86, cached by its text (inputs do not change the code)."""
    key = program.describe()
    exe = _COMPILED.get(key)
    if exe is None:
        exe = tc.compile(program.graph, target="x86_avx512")
        _COMPILED[key] = exe
        if len(_COMPILED) > 64:
            _COMPILED.popitem(last=False)
    return exe


def _compile_and_check(program: RandomProgram) -> tc.Executable:
    exe = _compile(program)
    program.check(exe(**program.inputs))
    if program.fused:  # a chain big enough to pay: the x86 plugin must fuse it (a pad
        # the packing does not fold joins the chain)
        fused = {name for kernel in exe.kernels for name in kernel.attrs.get("fused", ())}
        # computes the graph passes folded away (inline_elementwise) are in no kernel
        remaining = {t.name for t in exe.graph.computes}
        expected = set(program.fused) & remaining
        assert expected and expected <= fused, (f"{program.describe()}\n"
                                                f"notes: {exe.report.notes}")
        assert any(note.startswith("fused ") for note in exe.report.notes), exe.report.notes
    return exe


def _check_tensorized(program: RandomProgram, flags: frozenset[str]) -> None:
    feature, instruction = INTRINSIC[program.family]
    if feature not in flags:
        pytest.skip(f"this CPU has no {feature}: the {program.family} path cannot run")
    exe = _compile_and_check(program)
    if program.features:  # large enough for the tensorized template (tiny ones are not)
        text = "\n".join(source.text for source in exe.sources.values())
        assert instruction in text, f"{program.describe()}\nno {instruction} in the code"


#: programs per family in the default run (200 in all); ``make test-slow`` runs ten times more
QUOTA = {"elementwise": 35, "integer": 30, "reduction": 30, "index": 15, "cast": 15,
         "operator": 25, "gemm_chain": 10, "conv_chain": 10, "int8_gemm": 15, "bf16_gemm": 15}


def _run_family(family: str, examples: int, flags: frozenset[str]) -> None:
    @_settings(examples)
    @given(programs([family]))
    def check(program: RandomProgram) -> None:
        if family in TENSORIZED:
            _check_tensorized(program, flags)
        else:
            _compile_and_check(program)

    check()


@pytest.mark.parametrize("family", list(QUOTA))
def test_random_programs_match_reference(host_flags, family) -> None:
    _run_family(family, QUOTA[family], host_flags)


@pytest.mark.slow
@pytest.mark.parametrize("family", list(QUOTA))
def test_many_random_programs_match_reference(host_flags, family) -> None:
    _run_family(family, 10 * QUOTA[family], host_flags)


# the generator itself (no compiling) ---------------------------------------------------------
def test_a_seed_gives_the_same_program_and_inputs() -> None:
    for seed_value in (0, 7, 123):
        first, again = random_program(seed_value), random_program(seed_value)
        assert first.describe() == again.describe()
        assert first.inputs.keys() == again.inputs.keys()
        for name in first.inputs:
            np.testing.assert_array_equal(first.inputs[name], again.inputs[name])


def test_every_family_is_drawn_and_its_inputs_match_its_placeholders() -> None:
    seen = set()
    for seed_value in range(120):
        program = random_program(seed_value)
        seen.add(program.family)
        for tensor in program.graph.inputs:
            array = program.inputs[tensor.name]
            assert array.shape == tuple(tensor.shape) and array.dtype == tensor.dtype.numpy
    assert seen == set(family_names())


def test_integer_inputs_hold_the_extremes() -> None:
    program = random_program(3, families=["integer"])
    for tensor in program.graph.inputs:
        info = np.iinfo(tensor.dtype.numpy)
        values = program.inputs[tensor.name]
        if values.size >= 64:
            assert values.min() == info.min and values.max() == info.max


def test_check_catches_a_wrong_result() -> None:
    program = random_program(11, families=["reduction"])
    want = program.expected()
    program.check(want)
    wrong = [w.copy() for w in want]
    flat = wrong[0].reshape(-1)
    flat[0] = flat[0] + (1 if not np.issubdtype(flat.dtype, np.floating) else 1000.0)
    with pytest.raises(AssertionError, match="random program"):
        program.check(wrong)


def test_unknown_family_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown program families.*'nope'"):
        random_program(0, families=["nope"])
