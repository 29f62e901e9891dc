"""One kernel's Vitis-HLS C++ translation unit, rendered through the plugin's Jinja template.

The unit includes ``tilecraft_hls.h`` (the plugin's ``include/``: te's integer and NaN
helpers, and for C-simulation the plugin's ``ap_int.h`` / ``hls_half.h`` / ``hls_stream.h``)
and defines one ``extern "C"`` top function named after the kernel: every parameter is an AXI
master port (``#pragma HLS INTERFACE m_axi``, one bundle each, ``depth`` its element count so
co-simulation sizes it, ``max_widen_bitwidth`` the device's AXI data width) and an AXI-Lite
register of the ``control`` bundle, as is the return.
Helper functions (dataflow regions, their stages) come before it. The
:class:`~tilecraft.target.base.Source` carries in ``meta``: entry, params (name, dtype,
shape, output, storage), stages, streams.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Buffer, BufferLoad, For, Kernel, LoopKind, Store
>>> from tilecraft.te import Var, const
>>> A = Buffer("A", (40,), DType.INT8, level="DDR")
>>> B = Buffer("B", (40,), DType.INT32, level="DDR")
>>> t = Var("t")
>>> body = For(t, const(40), LoopKind.PIPELINED, Store(B, (t,),
...            BufferLoad(A, (t,)).astype("int32") * 3), initiation_interval=1)
>>> source = generate_hls(Kernel("widen", (A, B), ("B",), body), fpga_spec(dtype="int8"))
>>> print(source.text[source.text.index("extern"):])
extern "C" void widen(const ap_int<8>* A, ap_int<32>* B)
{
#pragma HLS INTERFACE m_axi port=A offset=slave bundle=gmem0 depth=40 max_widen_bitwidth=512
#pragma HLS INTERFACE m_axi port=B offset=slave bundle=gmem1 depth=40 max_widen_bitwidth=512
#pragma HLS INTERFACE s_axilite port=A bundle=control
#pragma HLS INTERFACE s_axilite port=B bundle=control
#pragma HLS INTERFACE s_axilite port=return bundle=control
    L_t: for (int t = 0; t < 40; ++t) {
#pragma HLS PIPELINE II=1
        B[t] = (((int)(A[t])) * 3);
    }
}
<BLANKLINE>
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

import jinja2

from tilecraft.codegen import Names
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.target.base import Source
from tilecraft.target.checks import check_kernel_supported
from tilecraft.target.spec import TargetSpec
from tilecraft_fpga_hls.codegen.dialect import HlsDialect
from tilecraft_fpga_hls.codegen.scope import free_names
from tilecraft_fpga_hls.codegen.statements import HlsEmitter
from tilecraft_fpga_hls.spec import (
    TARGET_NAME,
    fpga_spec,  # noqa: F401  (the doctest)
)

__all__ = ["LANGUAGE", "SUFFIX", "generate_hls"]

LANGUAGE = "hls-c++"
SUFFIX = "cpp"


@cache
def _kernel_template() -> jinja2.Template:
    """The unit's template, package data of the plugin (strict: a missing variable fails)."""
    text = (files("tilecraft_fpga_hls") / "templates" / "kernel.cpp.jinja").read_text("utf-8")
    return jinja2.Template(text, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def generate_hls(kernel: Kernel, spec: TargetSpec, target: str = TARGET_NAME) -> Source:
    """The HLS C++ source of ``kernel`` (module docstring); a CodegenError names the kernel
    and the construct or dtype it cannot express."""
    check_kernel_supported(kernel, spec)
    dialect = HlsDialect()
    names = Names(dialect.reserved)
    entry = names.fresh(kernel.name)
    emitter = HlsEmitter(kernel, names, dialect, entry)
    written = {id(buffer) for buffer in free_names(kernel.body).written}
    written |= {id(kernel.param(name)) for name in kernel.outputs}
    params, interface, meta_params = [], [], []
    # the port's data width (the device's axi_port_bits): HLS widens bursts of consecutive
    # elements up to it, so an unrolled loop of such elements moves one beat per cycle
    port_bits = int(spec.fixed_decisions.get("axi_port_bits", 512))
    for index, buffer in enumerate(kernel.params):
        if buffer.dtype not in dialect.supported or buffer.lanes != 1 \
                or buffer.layout != "row_major":
            known = ", ".join(sorted(dtype.value for dtype in dialect.supported))
            raise CodegenError(f"kernel {kernel.name}: parameter {buffer.name} of element type "
                               f"{buffer.element_type} and layout {buffer.layout}; the HLS "
                               f"C++ code generator takes row-major buffers of {known}")
        output = id(buffer) in written
        params.append(emitter.declaration(buffer, const_=not output))
        name = names.buffer(buffer)
        interface.append(f"m_axi port={name} offset=slave bundle=gmem{index} "
                         f"depth={max(1, buffer.size)} max_widen_bitwidth={port_bits}")
        meta_params.append({"name": buffer.name, "dtype": buffer.dtype.value,
                            "shape": list(buffer.shape), "output": output,
                            "storage": dialect.storage_type(buffer.dtype)})
    interface += [f"s_axilite port={names.buffer(buffer)} bundle=control"
                  for buffer in kernel.params]
    interface.append("s_axilite port=return bundle=control")
    emitter.visit(kernel.body)
    fabric = spec.spatial.fabric if spec.spatial is not None else None
    device = str(spec.fixed_decisions.get("device", fabric.part if fabric else "FPGA"))
    text = _kernel_template().render(
        kernel_name=kernel.name, target=target, device=device,
        clock_mhz=f"{spec.compute.frequency_hz / 1e6:g}", entry=entry, params=params,
        interface=interface, functions=emitter.functions, stages=emitter.stage_names,
        body=emitter.lines)
    meta: dict[str, Any] = {
        "entry": entry, "params": meta_params, "stages": list(emitter.stage_names),
        "streams": [{"name": stream.name, "dtype": stream.dtype.value, "depth": stream.depth}
                    for stream in emitter.streams],
    }
    return Source(target, kernel.name, LANGUAGE, text, entry, meta=meta, suffix=SUFFIX)
