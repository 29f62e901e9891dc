"""bench/accuracy_cachegrind.py: the fused C programs compute E, and cachegrind's count of the
bytes moved into a small simulated L1 agrees with Algorithm 1 on a tiny GEMM chain."""

from __future__ import annotations

import doctest
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tilecraft.fusion import FusionError, gemm_chain, legal_orders
from tilecraft.target.registry import get_target

_SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "accuracy_cachegrind.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("accuracy_cachegrind", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


acc = _load_script()

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None,
                               reason="gcc is not installed (apt-get install gcc)")
needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None,
    reason="valgrind's cachegrind and gcc are needed (apt-get install valgrind gcc)")


def test_fused_nest_splits_shared_producer_and_consumer_loops():
    chain = gemm_chain(64, 64, 64, 64)
    assert acc.fused_nest(chain, "mlkn") == acc.FusedNest("mlkn", ("m", "l"), ("k",), ("n",))
    assert acc.fused_nest(chain, "mlnk") == acc.FusedNest("mlnk", ("m", "l", "n"), ("k",), ())
    assert acc.fused_nest(chain, "lnmk") == acc.FusedNest("lnmk", ("l", "n", "m"), ("k",), ())


def test_illegal_order_is_rejected_with_the_legal_ones():
    with pytest.raises(FusionError, match=r"'mkln' is not legal.*pick one of .*mlkn"):
        acc.c_program(gemm_chain(64, 64, 64, 64), "mkln", dict(m=16, n=16, k=16, l=16))


@pytest.mark.parametrize("tiles, culprit", [
    (dict(m=0, n=16, k=16, l=16), r"tile m=0 must be an integer in \[1, 64\]"),
    (dict(m=16, n=65, k=16, l=16), r"tile n=65 must be an integer in \[1, 64\]"),
    (dict(m=16, n=16, k=16), r"missing: l"),
    (dict(m=16, n=16, k=16, l=16, x=4), r"exactly the loops m, n, k, l"),
])
def test_bad_tiles_are_rejected(tiles, culprit):
    with pytest.raises(FusionError, match=culprit):
        acc.c_program(gemm_chain(64, 64, 64, 64), "mlkn", tiles)


def test_agreement_statistics():
    perfect = acc.agreement([1.0, 2.0, 5.0], [1.0, 2.0, 5.0])
    assert perfect.r2_identity == pytest.approx(1.0) and perfect.pearson == pytest.approx(1.0)
    doubled = acc.agreement([1.0, 2.0, 5.0], [2.0, 4.0, 10.0])
    assert doubled.pearson == pytest.approx(1.0) and doubled.slope == pytest.approx(2.0)
    assert doubled.r2_identity < 0.5  # correlated, but far from y = x
    with pytest.raises(ValueError, match="two distinct points"):
        acc.agreement([1.0], [1.0])


def test_cachegrind_output_is_parsed_per_function():
    text = ("events: Ir D1mr D1mw\nfl=k.c\nfn=main\n3 100 7 1\n"
            "fn=fused_kernel\n10 50 4 2\n11 5 1 0\nfn=fused_kernel.constprop.0\n12 1 1 1\n")
    assert acc.function_counts(text) == {"Ir": 56, "D1mr": 6, "D1mw": 3}
    with pytest.raises(RuntimeError, match="no 'events:' line"):
        acc.function_counts("fn=main\n")


def _run_native(chain, order, tiles, tmp_path):
    binary = acc.build(acc.c_program(chain, order, tiles, evict_bytes=4096), tmp_path, order)
    subprocess.run([str(binary), str(tmp_path / f"{order}.E")], check=True)
    return acc.read_output(tmp_path / f"{order}.E", chain)


@needs_gcc
def test_every_legal_order_computes_E_with_partial_tiles(tmp_path):
    chain = gemm_chain(23, 17, 19, 29)  # primes; tiles leave partial tiles on every loop
    expected = acc.reference_output(chain)
    tiles = dict(m=5, n=16, k=7, l=16)
    for order in ("".join(o) for o in legal_orders(chain)):
        np.testing.assert_allclose(_run_native(chain, order, tiles, tmp_path), expected,
                                   rtol=1e-6, err_msg=f"order {order}")


@needs_gcc
def test_size_one_chain(tmp_path):
    chain = gemm_chain(1, 1, 1, 1)
    result = _run_native(chain, "mlkn", dict(m=1, n=1, k=1, l=1), tmp_path)
    np.testing.assert_allclose(result, acc.reference_output(chain))


@needs_valgrind
def test_cachegrind_traffic_agrees_with_the_model_on_a_tiny_chain(tmp_path):
    chain = gemm_chain(32, 32, 32, 32)
    level = acc.Cache("D1", 4096, 4, 64)  # 4 KiB: the 16 KiB of tensors do not fit
    below = acc.Cache("LL", 65536, 8, 64)
    expected = acc.reference_output(chain)
    runs = [("mlkn", dict(m=4, n=16, k=16, l=16)), ("mlkn", dict(m=8, n=16, k=16, l=16)),
            ("mlnk", dict(m=8, n=16, k=16, l=16))]
    compulsory = 4 * 32 * 32 * 4  # A, B, D and E, each moved at least once
    for order, tiles in runs:
        result = acc.measure(chain, order, tiles, level, below, tmp_path, expected=expected)
        assert result.usage_bytes <= level.size_bytes
        assert result.measured_bytes >= compulsory
        assert 0.85 < result.measured_bytes / result.predicted_bytes < 1.15, result


def test_simulated_caches_are_this_machines_and_cachegrind_can_take_them():
    spec = get_target("x86_avx512").spec
    for cache, name in zip(acc.target_caches(), ("L1", "L2"), strict=True):
        level = spec.memory.level(name)
        assert (cache.size_bytes, cache.line_bytes) == (level.size_bytes, level.line_bytes)
        if level.associativity is not None and level.sets & (level.sets - 1) == 0:
            assert cache.ways == level.associativity
        sets = cache.size_bytes // (cache.ways * cache.line_bytes)
        assert sets * cache.ways * cache.line_bytes == cache.size_bytes
        assert sets & (sets - 1) == 0  # valgrind: "Cache set count is not a power of two"
    # Zen 5's L1 (48 KiB, 12 ways) and Zen 4's (32 KiB, 8 ways) as they are; 12 ways of a
    # 32 KiB cache (the old hard-coded associativity on Zen 4) is no geometry cachegrind takes
    assert acc.simulated_cache("L1", 49152, 12, 64).ways == 12
    assert acc.simulated_cache("L1", 32768, 8, 64).ways == 8
    assert acc.simulated_cache("L1", 32768, 12, 64).ways in (8, 16)


def test_docstring_examples():
    assert doctest.testmod(acc).failed == 0


@needs_valgrind
def test_script_prints_the_table_and_fits(capsys):
    assert acc.main(["--size", "48", "--count", "2", "--orders", "mlkn,mlnk", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines()
             if line.startswith(("mlkn ", "mlnk ")) and " m=" in line]
    assert len(table) == 6  # per order: the solver's tiles and two samples
    assert any(line.startswith("all ") and "a = " in line for line in out.splitlines())


@needs_valgrind
def test_script_rejects_an_illegal_order_before_measuring():
    with pytest.raises(FusionError, match="'kmln' is not legal"):
        acc.main(["--size", "32", "--orders", "kmln"])
