"""The C header of an exported kernel library: prototypes, argument docs, and a run function.

For a program compiled ahead of time (``tilecraft compile --output-dir``), the header declares
every kernel's entry point (``void NAME(void **args, int64_t begin, int64_t end)``, see
:mod:`.codegen.module`), documents its arguments (order, element type, shape, read or written,
graph input / output / intermediate / workspace) and its parallel loop, and defines
``static inline int PREFIX_run(...)`` which takes the graph's inputs and outputs, allocates the
intermediates and workspaces, calls the kernels in order on the calling thread and frees them
(0 on success, -1 when an allocation fails). The graph's constants (a model's weights) are in
the library, each under :func:`constant_symbol`, declared ``extern const`` here.

>>> from tilecraft import te
>>> from tilecraft.graph import Graph
>>> from tilecraft.lower import LoweringOptions, lower_compute
>>> from tilecraft_x86_avx512.spec import build_spec
>>> A = te.placeholder((4, 8), name="A")
>>> B = te.compute((4, 8), lambda i, j: A[i, j] * 2.0, name="B")
>>> kernel = lower_compute(B, LoweringOptions.from_spec(build_spec()))
>>> text = c_header("double_it", "x86_avx512", [(kernel, "B")], Graph.from_outputs([B]))
>>> print(next(line for line in text.splitlines() if line.startswith("static inline")))
static inline int double_it_run(const float *A, float *B_data)

(``B_data``: the kernel's entry point is called ``B``.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft_x86_avx512.codegen.analysis import const_int, find_parallel_loop, written_buffers

#: C element type per dtype (16-bit floats are passed as their bits)
C_TYPES = {DType.FLOAT32: "float", DType.FLOAT16: "uint16_t", DType.BFLOAT16: "uint16_t",
           DType.INT8: "int8_t", DType.UINT8: "uint8_t", DType.INT32: "int32_t",
           DType.BOOL: "uint8_t"}
#: C and C++ keywords: a tensor or kernel of such a name gets another identifier in C
C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch "
    "typedef union unsigned void volatile while alignas alignof and and_eq asm bitand bitor "
    "bool catch char8_t char16_t char32_t class compl concept const_cast consteval constexpr "
    "constinit co_await co_return co_yield decltype delete dynamic_cast explicit export false "
    "friend mutable namespace new noexcept not not_eq nullptr operator or or_eq private "
    "protected public reinterpret_cast requires static_assert static_cast template this "
    "thread_local throw true try typeid typename using virtual wchar_t xor xor_eq".split())
#: library functions the run function calls: no variable may shadow them
C_FUNCTIONS = frozenset({"aligned_alloc", "free", "memcpy"})
ALIGNMENT = 64
#: the run function's local array of argument pointers
ARGS = "tilecraft_args"


def c_identifier(name: str) -> str:
    """A C identifier for a tensor or program name.

    >>> c_identifier("conv2d.relu-1"), c_identifier("3x3"), c_identifier("int")
    ('conv2d_relu_1', 't_3x3', 'int_')
    """
    text = re.sub(r"[^A-Za-z0-9_]", "_", name) or "t"
    if text[0].isdigit():
        text = f"t_{text}"
    return f"{text}_" if text in C_KEYWORDS else text


def constant_symbol(name: str) -> str:
    """The library symbol holding the value of the constant tensor ``name`` (the weights a
    program was compiled with), 64-byte aligned.

    >>> constant_symbol("fc.weight")
    'tilecraft_const_fc_weight'
    """
    return f"tilecraft_const_{c_identifier(name)}"


@dataclass(frozen=True)
class _Buffer:
    """A tensor the run function passes to kernels: graph input/output or allocated."""

    name: str
    variable: str
    dtype: DType
    elements: int
    role: str  # "input", "output", "constant", "intermediate" or "workspace"


def _unique(name: str, used: set[str]) -> str:
    """``c_identifier(name)``, suffixed where it would clash with an entry point or another
    variable (a kernel and the tensor it computes often share a name)."""
    base = candidate = c_identifier(name)
    count = 1
    while candidate in used:
        count += 1
        candidate = f"{base}_{count}" if count > 2 else f"{base}_data"
    used.add(candidate)
    return candidate


def _shape_text(shape: Sequence[int]) -> str:
    return "".join(f"[{int(extent)}]" for extent in shape) or "[1]"


def _elements(shape: Sequence[int]) -> int:
    count = 1
    for extent in shape:
        count *= int(extent)
    return count


def c_header(prefix: str, target: str, kernels: Sequence[tuple[Kernel, str]], graph: Graph,
             description: str = "") -> str:
    """The header text for ``kernels`` (each with its entry symbol), in the order they compute
    ``graph``; ``prefix`` names the include guard and the run function."""
    prefix = c_identifier(prefix)
    # a kernel whose symbol is a C keyword is declared under another name bound to the symbol
    functions = {entry: c_identifier(entry) for _, entry in kernels}
    used = set(functions.values()) | {f"{prefix}_run", ARGS} | C_FUNCTIONS
    buffers: dict[str, _Buffer] = {}
    for tensor in graph.inputs:
        buffers[tensor.name] = _Buffer(tensor.name, _unique(tensor.name, used), tensor.dtype,
                                       _elements(tensor.shape), "input")
    constants = []
    for tensor in graph.constants:   # stored in the library (export_shared_library)
        symbol = constant_symbol(tensor.name)
        used.add(symbol)
        buffers[tensor.name] = _Buffer(tensor.name, symbol, tensor.dtype,
                                       _elements(tensor.shape), "constant")
        constants.append(f"extern const {C_TYPES[tensor.dtype]} {symbol}"
                         f"[{_elements(tensor.shape)}]; /* constant {tensor.name}"
                         f"{_shape_text(tensor.shape)} */")
    outputs = {tensor.name for tensor in graph.outputs}
    computes = {tensor.name: tensor for tensor in graph.computes}
    blocks, calls = [], []
    for kernel, entry in kernels:
        for name in kernel.outputs:
            if name in buffers:
                continue
            param = next(p for p in kernel.params if p.name == name)
            role = "output" if name in outputs else \
                "intermediate" if name in computes else "workspace"
            buffers[name] = _Buffer(name, _unique(name, used), param.dtype,
                                    _elements(param.shape), role)
        unbound = [p.name for p in kernel.params if p.name not in buffers]
        if unbound:
            raise CodegenError(
                f"kernel {kernel.name!r} reads {', '.join(unbound)}: neither a graph input, a "
                "constant of the graph nor written by an earlier kernel; export the kernels of "
                "this graph, in the order they compute it")
        blocks.append(_kernel_block(kernel, entry, functions[entry], buffers))
        parallel = find_parallel_loop(kernel)
        extent = const_int(parallel.loop.extent) if parallel is not None else 0
        arguments = ", ".join(f"(void *){buffers[p.name].variable}" for p in kernel.params)
        calls.append(f"    {{ void *{ARGS}[] = {{{arguments}}}; "
                     f"{functions[entry]}({ARGS}, 0, {extent}); }}")
    guard = f"TILECRAFT_{prefix.upper()}_H"
    lines = [
        f"/* {prefix}: kernels compiled ahead of time by tilecraft for {target}.",
        *(f"   {line}" for line in _wrap(description)),
        "",
        "   Entry points: void NAME(void **args, int64_t begin, int64_t end). args[k] is the",
        "   data pointer of the kernel's k-th argument below: C-contiguous (row-major), of the",
        "   element type and shape given; a written argument must not overlap another one.",
        "   [begin, end) is the slice of the kernel's parallel loop to run: (0, EXTENT) runs it",
        "   all; where the pieces may run concurrently, [0, EXTENT) may be split across threads.",
        "   A kernel without a parallel loop ignores begin and end.",
        "",
        f"   {prefix}_run() calls every kernel in order on the calling thread. Link with",
        f"   -l{prefix} -lm. Do not edit: generated. */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        "/* the JSON manifest of the library's kernels (what tilecraft loads them back with) */",
        "const char *tilecraft_manifest(void);",
        "",
        *([ "/* the constants the program was compiled with (its weights), in the library */",
            *constants, ""] if constants else []),
        *blocks,
        *_run_function(prefix, graph, buffers, calls, used),
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        f"#endif /* {guard} */",
        "",
    ]
    return "\n".join(lines)


def _wrap(text: str, width: int = 88) -> list[str]:
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _kernel_block(kernel: Kernel, entry: str, function: str,
                  buffers: dict[str, _Buffer]) -> str:
    written = {buffer.name for buffer in written_buffers(kernel)}
    parallel = find_parallel_loop(kernel)
    lines = [f"/* kernel {kernel.name!r}"]
    for index, param in enumerate(kernel.params):
        buffer = buffers[param.name]
        access = "written" if param.name in written else "read"
        lines.append(f"     args[{index}] {param.name}: {param.dtype.value}"
                     f"{_shape_text(param.shape)} ({C_TYPES[param.dtype]}), {access}, "
                     f"{buffer.role}")
    if parallel is None:
        lines.append("     no parallel loop: begin and end are ignored */")
    else:
        together = "may" if parallel.safe else "must not"
        lines.append(f"     parallel loop of extent {const_int(parallel.loop.extent)}: its "
                     f"pieces {together} run concurrently */")
        lines.append(f"#define {function.upper()}_PARALLEL_EXTENT "
                     f"{const_int(parallel.loop.extent)}")
    label = "" if function == entry else f' __asm__("{entry}")'  # GCC / Clang: the symbol
    lines.append(f"void {function}(void **args, int64_t begin, int64_t end){label};")
    return "\n".join(lines) + "\n"


def _run_function(prefix: str, graph: Graph, buffers: dict[str, _Buffer],
                  calls: list[str], used: set[str]) -> list[str]:
    arguments = [f"const {C_TYPES[t.dtype]} *{buffers[t.name].variable}"
                 for t in graph.inputs]
    copies = []  # an output that is also an input: its own argument, filled with a copy
    for tensor in graph.outputs:
        buffer = buffers[tensor.name]
        variable = buffer.variable
        if buffer.role == "input":
            variable = _unique(f"{tensor.name}_out", used)
            copies.append(f"    memcpy({variable}, {buffer.variable}, "
                          f"{buffer.elements * buffer.dtype.bytes}); /* output {tensor.name} "
                          "is the input itself: a copy */")
        arguments.append(f"{C_TYPES[tensor.dtype]} *{variable}")
    allocated = [b for b in buffers.values() if b.role in ("intermediate", "workspace")]
    body = [f"/* the whole program: inputs {', '.join(t.name for t in graph.inputs)}; "
            f"outputs {', '.join(t.name for t in graph.outputs)} */",
            f"static inline int {prefix}_run({', '.join(arguments)})", "{"]
    for buffer in allocated:
        # whole lines, at least one: aligned_alloc(64, 0) may return NULL
        size = max(1, -(-buffer.elements * buffer.dtype.bytes // ALIGNMENT)) * ALIGNMENT
        body.append(f"    {C_TYPES[buffer.dtype]} *{buffer.variable} = "
                    f"({C_TYPES[buffer.dtype]} *)aligned_alloc({ALIGNMENT}, {size}); "
                    f"/* {buffer.role} {buffer.name} */")
    if allocated:
        missing = " || ".join(f"!{b.variable}" for b in allocated)
        body.append(f"    if ({missing}) {{")
        body += [f"        free({b.variable});" for b in allocated]
        body += ["        return -1;", "    }"]
    body += calls + copies
    body += [f"    free({b.variable});" for b in allocated]
    body += ["    return 0;", "}"]
    return body
