"""Skips for tests that run code needing an ISA extension this CPU may lack.

Every AVX-512 machine runs the plugin's fp32 code; int8 micro-kernels need AVX512-VNNI
(Ice Lake, Zen 4 and later), bfloat16 ones AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4
and later). A test that runs such code natively, or expects the host's spec to declare it,
skips with the missing flag as the reason.
"""

from __future__ import annotations

import functools

import pytest
from tilecraft_x86_avx512.host import read_cpuinfo

VNNI = "avx512_vnni"
BF16 = "avx512_bf16"
#: the flag each micro-kernel's instructions need (as /proc/cpuinfo spells it)
MICRO_KERNEL_FLAGS = {"vnni_u8s8": VNNI, "vnni_s8u8": VNNI, "vnni_row_sums_s8": VNNI,
                      "vnni_row_sums_u8": VNNI, "dot_bf16": BF16}


@functools.cache
def host_flags() -> frozenset[str]:
    return read_cpuinfo()[1]


def missing(*flags: str) -> list[str]:
    """The flags among ``flags`` (always with avx512f) this CPU lacks."""
    return [flag for flag in ("avx512f", *flags) if flag not in host_flags()]


def needs(*flags: str) -> pytest.MarkDecorator:
    """Skip the test (a decorator, or ``pytestmark``) where this CPU lacks one of ``flags``."""
    absent = missing(*flags)
    return pytest.mark.skipif(bool(absent), reason=f"this CPU has no {', '.join(absent)}")


def skip_without(*flags: str) -> None:
    """Skip the running test where this CPU lacks one of ``flags``."""
    absent = missing(*flags)
    if absent:
        pytest.skip(f"this CPU has no {', '.join(absent)}")
