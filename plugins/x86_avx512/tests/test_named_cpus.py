"""Named CPUs (``x86_avx512:<cpu>``): specs from data, code generated and assembled for each
CPU without running it, execution refused with the missing features named, and an exported
library + C header called from a C program and checked against the reference interpreter."""

from __future__ import annotations

import shutil
import subprocess
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest
import yaml
from c_programs import run_c_program
from tilecraft_x86_avx512 import cpus
from tilecraft_x86_avx512 import target as target_module
from tilecraft_x86_avx512.host import read_cpuinfo
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import CodegenError, LoweringError, PluginError, TargetError
from tilecraft.target.registry import get_target

HOST_FLAGS = read_cpuinfo()[1]
ELF = b"\x7fELF"


def gemm(m: int, k: int, n: int, a: str, b: str, out: str | None = None) -> te.Tensor:
    A = te.placeholder((m, k), a, name="A")
    B = te.placeholder((k, n), b, name="B")
    return ops.matmul(A, B, out_dtype=out, name="C")


def assembly_of(target: X86Avx512Target, output: te.Tensor) -> str:
    exe = tc.compile(output, target=target)
    return "\n".join(target.assembly(source) for source in exe.sources.values())


def needs_features_of(cpu: str) -> None:
    missing = cpus.missing_features(cpus.cpu_data(cpu), HOST_FLAGS)
    if missing:
        pytest.skip(f"this host lacks {', '.join(missing)} of {cpu}")


def test_the_catalogue_lists_the_five_cpus_with_their_caches() -> None:
    assert set(cpus.known_cpus()) >= {"skylake-avx512", "icelake-server", "sapphirerapids",
                                      "znver4", "znver5"}
    zen4, zen5 = cpus.cpu_data("znver4"), cpus.cpu_data("znver5")
    assert (zen4.cache("L1").size_bytes, zen4.cache("L1").ways) == (32768, 8)
    assert (zen5.cache("L1").size_bytes, zen5.cache("L1").ways) == (49152, 12)
    # Zen 4 runs a 512-bit FMA as two halves: half Zen 5's rate per clock
    assert zen4.fma_flops_per_core / zen4.nominal_clock_hz == 32
    assert zen5.fma_flops_per_core / zen5.nominal_clock_hz == 64
    spr = cpus.cpu_data("sapphirerapids")
    assert {"amx_tile", "avx512_fp16", "avx512_bf16"} <= set(spr.features)
    assert "avx512_vnni" not in cpus.cpu_data("skylake-avx512").features


@pytest.mark.parametrize("cpu", cpus.known_cpus())
def test_spec_of_a_named_cpu_comes_from_its_data(cpu: str) -> None:
    target = X86Avx512Target(cpu=cpu, cores=3)
    data = cpus.cpu_data(cpu)
    spec = target.spec
    assert target.name == f"x86_avx512:{cpu}" and spec.name == "x86_avx512"
    assert spec.compute.cores == 3 and spec.compute.frequency_hz == data.nominal_clock_hz
    levels = {level.name: level.size_bytes for level in spec.memory.levels}
    for cache in data.caches:
        assert levels[cache.name] == cache.size_bytes
    intrinsics = {decl.name for decl in spec.intrinsics}
    micro_kernels = {decl.name for decl in spec.micro_kernels}
    assert ("vpdpbusd" in intrinsics) == ("avx512_vnni" in data.features)
    assert ("vdpbf16ps" in intrinsics) == ("avx512_bf16" in data.features)
    assert ("vnni_u8s8" in micro_kernels) == ("avx512_vnni" in data.features)
    assert ("dot_bf16" in micro_kernels) == ("avx512_bf16" in data.features)
    assert "fma_f32x16" in intrinsics and "outer_product_f32" in micro_kernels


@pytest.mark.parametrize("cpu", cpus.known_cpus())
def test_code_for_every_named_cpu_generates_and_assembles(cpu: str, tmp_path: Path) -> None:
    target = get_target(f"x86_avx512:{cpu}")
    A = te.placeholder((48, 96), name="A")
    B = te.placeholder((96, 64), name="B")
    C = ops.relu(ops.matmul(A, B))
    exe = tc.compile(C, target=target)
    for source in exe.sources.values():
        assert source.target == f"x86_avx512:{cpu}"
        assert "zmm" in target.assembly(source)
        artifact = target.build(source)
        object_code = artifact.meta.get("object_code")
        assert artifact.handle is not None or object_code[:4] == ELF
    library = target.export_shared_library(list(exe.sources.values()), tmp_path / "k.so")
    assert library.read_bytes()[:4] == ELF


def test_skylake_code_has_no_vnni_or_bf16_instructions() -> None:
    skylake = X86Avx512Target(cpu="skylake-avx512", cores=2)
    int8 = assembly_of(skylake, gemm(64, 128, 64, "uint8", "int8", "int32"))
    bf16 = assembly_of(skylake, gemm(64, 128, 64, "bfloat16", "bfloat16", "float32"))
    for text in (int8, bf16):
        assert "vpdpbusd" not in text and "vdpbf16ps" not in text and "zmm" in text
    icelake = X86Avx512Target(cpu="icelake-server", cores=2)
    assert "vdpbf16ps" not in assembly_of(
        icelake, gemm(64, 128, 64, "bfloat16", "bfloat16", "float32"))
    # nothing maps onto an intrinsic the CPU lacks
    with pytest.raises(TargetError, match="vpdpbusd"):
        tc.compile(gemm(16, 64, 16, "uint8", "int8", "int32"), skylake,
                   tensorize={"C": "vpdpbusd"})
    # and the template refuses to be forced onto a micro-kernel the CPU lacks
    with pytest.raises(LoweringError, match="vnni_u8s8"):
        skylake.lower_compute(gemm(64, 128, 64, "uint8", "int8", "int32"),
                              tc.lower.LoweringOptions.from_spec(skylake.spec), {"MI": 4})


@pytest.mark.parametrize("cpu", ["sapphirerapids", "znver4", "znver5"])
def test_int8_and_bf16_gemms_use_the_dot_product_instructions(cpu: str) -> None:
    target = X86Avx512Target(cpu=cpu, cores=2)
    assert "vpdpbusd" in assembly_of(target, gemm(64, 128, 64, "uint8", "int8", "int32"))
    assert "vdpbf16ps" in assembly_of(
        target, gemm(64, 128, 64, "bfloat16", "bfloat16", "float32"))


def test_executing_a_cpu_this_host_lacks_is_refused_with_the_features_named() -> None:
    target = get_target("x86_avx512:sapphirerapids")
    missing = cpus.missing_features(cpus.cpu_data("sapphirerapids"), HOST_FLAGS)
    if not missing:
        pytest.skip("this host has every feature of sapphirerapids")
    availability = target.available()
    assert availability.codegen and availability.build and not availability.execute
    for feature in missing:
        assert feature in availability.reasons["execute"]
    source = target.codegen(tc.compile(gemm(32, 32, 32, "float32", "float32"),
                                       target=target).kernels[0])
    artifact = target.build(source)  # assembled, not loaded
    assert artifact.handle is None and artifact.meta["object_code"][:4] == ELF
    with pytest.raises(TargetError, match=f"cannot execute on this machine: .*{missing[0]}"):
        target.load(artifact)


def test_without_avx512_the_host_cannot_execute_but_named_cpus_still_compile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(target_module, "read_cpuinfo",
                        lambda: ("an AVX2 CPU", frozenset({"avx2", "fma"})))
    target_module._availability.cache_clear()
    target_module._named_availability.cache_clear()
    try:
        host = X86Avx512Target().available()
        assert not host.execute and "no AVX-512F" in host.reasons["execute"]
        named = X86Avx512Target(cpu="znver4", cores=1)
        availability = named.available()
        assert availability.build and not availability.execute
        assert "avx512f" in availability.reasons["execute"]
        exe = tc.compile(gemm(32, 64, 32, "float32", "float32"), target=named)
        assert "zmm" in named.assembly(next(iter(exe.sources.values())))
    finally:
        target_module._availability.cache_clear()
        target_module._named_availability.cache_clear()


def test_unknown_cpus_and_malformed_names_are_clear_errors() -> None:
    with pytest.raises(TargetError, match="unknown x86 CPU 'pentium4'.*known CPUs are "
                                          "icelake-server, sapphirerapids"):
        get_target("x86_avx512:pentium4")
    with pytest.raises(TargetError, match="unknown x86 CPU 'zen9'"):
        X86Avx512Target(cpu="zen9")
    with pytest.raises(TargetError, match="malformed"):
        get_target("x86_avx512:")
    with pytest.raises(TargetError, match="unknown target 'no_such'"):
        get_target("no_such:znver4")
    assert get_target("x86_avx512:znver4") is get_target("x86_avx512:znver4")


def test_a_bad_catalogue_names_the_cpu_and_the_field() -> None:
    data = yaml.safe_load((files("tilecraft_x86_avx512") / cpus.CPUS_FILE).read_text())
    assert cpus.CpuCatalog(**data).cpus.keys() == set(cpus.known_cpus())
    data["cpus"]["znver4"]["caches"][0]["ways"] = 12  # 32 KiB is no whole number of 12-way sets
    data["cpus"]["znver5"]["features"].append("avx1024")
    with pytest.raises(PluginError) as error:
        cpus.CpuCatalog(**data)
    message = str(error.value)
    assert "cpus.znver4.caches[0] (L1): L1: 32768 bytes are not a whole number of sets" in message
    assert "cpus.znver5.features: unknown features ['avx1024']" in message


def test_a_library_for_a_cpu_this_host_lacks_is_refused_on_load(tmp_path: Path) -> None:
    missing = cpus.missing_features(cpus.cpu_data("sapphirerapids"), HOST_FLAGS)
    if not missing or "avx512f" not in HOST_FLAGS:
        pytest.skip("needs an AVX-512 host without every sapphirerapids feature")
    spr = X86Avx512Target(cpu="sapphirerapids", cores=1)
    exe = tc.compile(gemm(32, 32, 32, "float32", "float32"), target=spr)
    library = spr.export_shared_library(list(exe.sources.values()), tmp_path / "spr.so")
    with pytest.raises(TargetError, match=f"code for sapphirerapids.*{missing[0]}"):
        X86Avx512Target().load_shared_library(library)


C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "prog.h"

static void *read_file(const char *path, size_t bytes) {
    void *data = malloc(bytes);
    FILE *f = fopen(path, "rb");
    if (!f || !data || fread(data, 1, bytes, f) != bytes) { exit(3); }
    fclose(f);
    return data;
}

int main(void) {
    float *A = read_file("A.bin", 120 * 200 * 4);
    float *B = read_file("B.bin", 200 * 80 * 4);
    float *bias = read_file("bias.bin", 80 * 4);
    float *Y = malloc(120 * 80 * 4);
    if (prog_run(A, B, bias, Y) != 0) { return 4; }
    FILE *f = fopen("Y.bin", "wb");
    fwrite(Y, 4, 120 * 80, f);
    fclose(f);
    printf("%s\n", tilecraft_manifest() ? "manifest ok" : "no manifest");
    return 0;
}
"""


def test_an_exported_library_and_header_work_from_c(tmp_path: Path) -> None:
    needs_features_of("znver4")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    target = get_target("x86_avx512:znver4")
    A = te.placeholder((120, 200), name="A")
    B = te.placeholder((200, 80), name="B")
    bias = te.placeholder((80,), name="bias")
    C = ops.matmul(A, B)
    Y = te.compute((120, 80), lambda i, j: te.max(C[i, j] + bias[j], 0.0), name="Y")
    graph = tc.Graph.from_outputs([Y])
    exe = tc.compile(graph, target=target)
    # the C program calls several kernels in order: B (120 rows of C, 80 columns, a panel of
    # B larger than half of L1) is packed by a kernel of its own
    assert len(exe.compiled) >= 2
    written = target.export([(c.kernel, c.source) for c in exe.compiled], graph, tmp_path,
                            "prog")
    assert [path.name for path in written] == ["libprog.so", "prog.h"]
    header = (tmp_path / "prog.h").read_text()
    for compiled in exe.compiled:
        assert f"void {compiled.source.entry}(void **args, int64_t begin, int64_t end);" \
            in header
    assert "static inline int prog_run(const float *A, const float *B, const float *bias, " \
           "float *Y" in header
    rng = np.random.default_rng(7)
    inputs = {"A": rng.standard_normal((120, 200)).astype(np.float32),
              "B": rng.standard_normal((200, 80)).astype(np.float32),
              "bias": rng.standard_normal(80).astype(np.float32)}
    for name, array in inputs.items():
        array.tofile(tmp_path / f"{name}.bin")
    result = run_c_program(tmp_path, C_MAIN)
    assert result.returncode == 0 and "manifest ok" in result.stdout, result.stderr
    got = np.fromfile(tmp_path / "Y.bin", dtype=np.float32).reshape(120, 80)
    expected = tc.reference.run(graph, **inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cpu", ["skylake-avx512", "icelake-server", "znver4"])
def test_int8_and_bf16_gemms_for_a_named_cpu_match_the_reference(cpu: str) -> None:
    """Where the CPU lacks VNNI / BF16 the core's lowering computes them; both ways match."""
    needs_features_of(cpu)
    target = X86Avx512Target(cpu=cpu, cores=2)
    rng = np.random.default_rng(3)
    for a, b, out in (("uint8", "int8", "int32"), ("int8", "int8", "int32"),
                      ("bfloat16", "bfloat16", "float32")):
        C = gemm(48, 80, 40, a, b, out)
        exe = tc.compile(C, target=target)
        assert {k.mode for k in exe.report.kernels} == {"native"}
        inputs = {}
        for tensor in tc.Graph.from_outputs([C]).inputs:
            if tensor.dtype.is_int:
                low = 0 if tensor.dtype.value == "uint8" else -128
                values = rng.integers(low, low + 256, tensor.shape)
            else:
                values = rng.standard_normal(tensor.shape)
            inputs[tensor.name] = values.astype(tensor.dtype.numpy)
        expected = tc.reference.run(tc.Graph.from_outputs([C]), **inputs)
        np.testing.assert_allclose(exe(**inputs), expected, rtol=1e-3, atol=1e-3)


INT8_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "two_outs.h"

int main(void) {
    static uint8_t A[32 * 64];
    static int8_t B[64 * 32];
    static int32_t C[32 * 32], D[32 * 32];
    FILE *f = fopen("AB.bin", "rb");
    if (!f || fread(A, 1, sizeof A, f) != sizeof A || fread(B, 1, sizeof B, f) != sizeof B) {
        return 3;
    }
    fclose(f);
    if (two_outs_run(A, B, C, D) != 0) { return 4; }
    f = fopen("CD.bin", "wb");
    fwrite(C, 1, sizeof C, f);
    fwrite(D, 1, sizeof D, f);
    fclose(f);
    return 0;
}
"""


def test_a_multi_output_int8_program_named_after_a_c_keyword_works_from_c_and_cpp(
        tmp_path: Path) -> None:
    """Its kernel's symbol is ``int``: the header declares it under another name bound to the
    symbol (``__asm__``), and the tensor ``int`` is passed as ``int_``."""
    needs_features_of("icelake-server")
    compilers = [name for name in ("gcc", "g++") if shutil.which(name)]
    if "gcc" not in compilers:
        pytest.skip("gcc is not installed")
    target = X86Avx512Target(cpu="icelake-server", cores=2)
    A = te.placeholder((32, 64), "uint8", name="A")
    B = te.placeholder((64, 32), "int8", name="B")
    C = ops.matmul(A, B, out_dtype="int32", name="int")  # a C keyword as a compute's name
    D = te.compute((32, 32), lambda i, j: C[i, j] * 2 + 1, name="D")
    graph = tc.Graph.from_outputs([C, D])
    exe = tc.compile(graph, target=target)
    target.export([(c.kernel, c.source) for c in exe.compiled], graph, tmp_path, "two-outs")
    header = (tmp_path / "two_outs.h").read_text()
    assert "static inline int two_outs_run(const uint8_t *A, const int8_t *B, int32_t *int_" \
        in header
    assert '__asm__("int");' in header
    (tmp_path / "main.c").write_text(INT8_MAIN)
    rng = np.random.default_rng(11)
    a = rng.integers(0, 256, (32, 64)).astype(np.uint8)
    b = rng.integers(-128, 128, (64, 32)).astype(np.int8)
    (tmp_path / "AB.bin").write_bytes(a.tobytes() + b.tobytes())
    expected_c, expected_d = tc.reference.run(graph, A=a, B=b)
    for compiler in compilers:
        language = "c" if compiler == "gcc" else "c++"
        subprocess.run([compiler, "-x", language, "-O1", "-Wall", "-Wextra", "-Werror",
                        "-o", "main", "main.c", "-x", "none", "-L.", "-ltwo_outs",
                        "-Wl,-rpath,$ORIGIN", "-lm"],
                       cwd=tmp_path, check=True, capture_output=True)
        assert subprocess.run(["./main"], cwd=tmp_path, timeout=60).returncode == 0
        out = np.fromfile(tmp_path / "CD.bin", dtype=np.int32)
        np.testing.assert_array_equal(out[:1024].reshape(32, 32), expected_c)
        np.testing.assert_array_equal(out[1024:].reshape(32, 32), expected_d)


@pytest.mark.parametrize("name", ["free", "expf", "main"])
def test_a_kernel_that_would_interpose_a_c_library_function_is_not_exported(
        name: str, tmp_path: Path) -> None:
    target = X86Avx512Target(cpu="znver4", cores=1)
    A = te.placeholder((8,), name="A")
    exe = tc.compile(te.compute((8,), lambda i: A[i] * 2.0, name=name), target=target)
    with pytest.raises(CodegenError, match=f"symbol '{name}'.*rename the compute"):
        target.export_shared_library(list(exe.sources.values()), tmp_path / "k.so")
    assert not (tmp_path / "k.so").exists()


def test_an_output_that_is_an_input_gets_its_own_argument_and_a_copy(tmp_path: Path) -> None:
    needs_features_of("znver4")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    target = X86Avx512Target(cpu="znver4", cores=1)
    A = te.placeholder((20,), name="A")
    graph = tc.Graph.from_outputs([A, te.compute((20,), lambda i: A[i] * 2.0 - 1.0, name="B")])
    exe = tc.compile(graph, target=target)
    target.export([(c.kernel, c.source) for c in exe.compiled], graph, tmp_path, "io")
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "io.h"\n'
        "int main(void) {\n"
        "    float a[20], a_out[20], b[20];\n"
        "    for (int i = 0; i < 20; i++) { a[i] = (float)i; a_out[i] = -7.0f; }\n"
        "    if (io_run(a, a_out, b)) return 1;\n"
        '    for (int i = 0; i < 20; i++) printf("%g %g\\n", a_out[i], b[i]);\n'
        "    return 0;\n}\n")
    subprocess.run(["gcc", "-Wall", "-Werror", "-o", "main", "main.c", "-L.", "-lio",
                    "-Wl,-rpath,$ORIGIN", "-lm"], cwd=tmp_path, check=True, capture_output=True)
    result = subprocess.run(["./main"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60, check=True)
    got = np.array([line.split() for line in result.stdout.splitlines()], dtype=np.float32)
    a = np.arange(20, dtype=np.float32)
    expected_a, expected_b = tc.reference.run(graph, A=a)
    np.testing.assert_array_equal(got[:, 0], expected_a)
    np.testing.assert_allclose(got[:, 1], expected_b)
