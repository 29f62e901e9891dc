"""Ahead-of-time: kernels linked into a shared library by gcc, loaded back through ctypes."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from c_programs import run_c_program
from x86_kernels import buffer, kernel, load, loop, seq, store, vloop, zeros_for

from tilecraft.errors import CodegenError, InputError, TargetError
from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.target.base import Artifact
from tilecraft.te import Var
from tilecraft.te.expr import Unary, UnaryOp


def _kernels():
    rows, cols = 130, 70
    x, y = buffer("X", (rows, cols)), buffer("Y", (rows, cols))
    i, j = Var("i"), Var("j")
    scaled = kernel("scaled.rows", [x, y], ["Y"], loop(i, rows, vloop(
        j, cols, store(y, (i, j), load(x, i, j) * (i + 1).astype("float32"))), LoopKind.PARALLEL))
    e, f = buffer("E", (37,)), buffer("F", (37,))
    k = Var("k")
    exps = kernel("exps", [e, f], ["F"], vloop(k, 37, seq(
        store(f, (k,), Unary(UnaryOp.EXP, load(e, k))))))
    return scaled, exps


@pytest.fixture(scope="module")
def library(native, tmp_path_factory):
    path = tmp_path_factory.mktemp("aot") / "kernels.so"
    scaled, exps = _kernels()
    written = native.export_shared_library([scaled, native.codegen(exps)], path)
    return written, native.load_shared_library(written)


def test_shared_library_round_trip(native, library):
    path, kernels = library
    assert path.exists() and sorted(kernels) == ["exps", "scaled.rows"]
    scaled, exps = _kernels()
    data = np.random.default_rng(19).standard_normal((130, 70)).astype(np.float32)
    aot, jit = zeros_for(scaled, X=data), zeros_for(scaled, X=data)
    kernels["scaled.rows"](aot)
    native.compile_kernel(scaled)(jit)
    np.testing.assert_array_equal(aot["Y"], jit["Y"])
    np.testing.assert_array_equal(aot["Y"], data * np.arange(1, 131, dtype=np.float32)[:, None])
    values = np.linspace(-5, 5, 37).astype(np.float32)
    aot_e, jit_e = zeros_for(exps, E=values), zeros_for(exps, E=values)
    kernels["exps"](aot_e)
    native.compile_kernel(exps)(jit_e)
    np.testing.assert_array_equal(aot_e["F"], jit_e["F"])


def test_library_kernels_validate_arrays(library):
    _, kernels = library
    with pytest.raises(InputError, match="'E'.*float32"):
        kernels["exps"]({"E": np.zeros(37, np.float64), "F": np.zeros(37, np.float32)})


def test_artifact_with_a_library_path_loads(native, library):
    path, _ = library
    function = native.load(Artifact(target="x86_avx512", kernel_name="exps", path=path))
    arrays = {"E": np.zeros(37, np.float32), "F": np.zeros(37, np.float32)}
    function(arrays)
    np.testing.assert_array_equal(arrays["F"], np.ones(37, np.float32))
    with pytest.raises(TargetError, match="no kernel 'missing'"):
        native.load(Artifact(target="x86_avx512", kernel_name="missing", path=path))


def test_failing_linker_reports_the_command(native, tmp_path, monkeypatch):
    monkeypatch.setenv("TILECRAFT_X86_CC", "false")
    with pytest.raises(CodegenError,
                       match=r"reproduce with: cd .*bad\.parts && false -shared -o .*bad\.so"):
        native.export_shared_library([_kernels()[1]], tmp_path / "bad.so")
    monkeypatch.setenv("TILECRAFT_X86_CC", "no-such-compiler-xyz")
    with pytest.raises(CodegenError, match="not installed.*no-such-compiler-xyz -shared"):
        native.export_shared_library([_kernels()[1]], tmp_path / "bad.so")


def test_duplicate_symbols_and_foreign_libraries_are_refused(native, tmp_path):
    exps = _kernels()[1]
    with pytest.raises(CodegenError, match="both have the symbol 'exps'"):
        native.export_shared_library([exps, exps], tmp_path / "twice.so")
    plain_c = tmp_path / "plain.c"
    plain_c.write_text("int answer(void) { return 42; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "plain.so"), str(plain_c)],
                   check=True)
    with pytest.raises(TargetError, match="not a tilecraft x86 kernel library"):
        native.load_shared_library(tmp_path / "plain.so")
    with pytest.raises(TargetError, match="cannot load the shared library"):
        native.load_shared_library(tmp_path / "missing.so")


CONSTANTS_MAIN = r"""
#include <stdio.h>
#include "prog.h"
int main(void) {
    static float A[50 * 40], Y[50 * 36];
    FILE *f = fopen("A.bin", "rb");
    if (!f || fread(A, 4, 50 * 40, f) != 50 * 40) { return 3; }
    fclose(f);
    if ((uintptr_t)tilecraft_const_fc_weight % 64) { return 5; }
    if (prog_run(A, Y) != 0) { return 4; }
    f = fopen("Y.bin", "wb");
    fwrite(Y, 4, 50 * 36, f);
    fclose(f);
    return 0;
}
"""


def test_a_c_program_runs_a_graph_with_its_constants(native, tmp_path):
    """A graph whose weights are bound at compile time (an imported model's): the library holds
    them (64-byte aligned, read-only), the header declares them, and prog_run passes them to the
    kernels, so the C program passes only the input."""
    import shutil

    import tilecraft as tc
    from tilecraft import ops, te

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    rng = np.random.default_rng(12)
    w = rng.standard_normal((40, 36)).astype(np.float32)
    bias = rng.standard_normal(36).astype(np.float32)
    product = ops.matmul(te.placeholder((50, 40), name="A"), te.constant(w, name="fc.weight"),
                         name="C")
    bias_t = te.constant(bias, name="fc.bias")
    out = te.compute((50, 36), lambda i, j: te.max(product[i, j] + bias_t[j], 0.0), name="Y")
    graph = tc.Graph.from_outputs([out])
    exe = tc.compile(graph, target=native)
    native.export([(c.kernel, c.source) for c in exe.compiled], graph, tmp_path, "prog")
    header = (tmp_path / "prog.h").read_text()
    assert "extern const float tilecraft_const_fc_weight[1440];" in header
    assert "static inline int prog_run(const float *A, float *Y_data)" in header  # Y: a kernel
    a = rng.standard_normal((50, 40)).astype(np.float32)
    a.tofile(tmp_path / "A.bin")
    result = run_c_program(tmp_path, CONSTANTS_MAIN)
    assert result.returncode == 0, (result.returncode, result.stderr)
    got = np.fromfile(tmp_path / "Y.bin", dtype=np.float32).reshape(50, 36)
    np.testing.assert_allclose(got, np.maximum(a @ w + bias, 0), rtol=1e-5, atol=1e-5)
