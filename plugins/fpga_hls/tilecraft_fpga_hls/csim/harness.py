"""The C++ file that makes one generated HLS source a callable library: it includes the source
unchanged and exports ``tc_csim_run(void** args)`` (0, or -1 with the message in
``tc_csim_error()``: a C-simulation error such as a stream read while empty), each argument
cast to its parameter's element type.

>>> print(harness_text("k.cpp", "scale", ["float", "ap_int<8>"]).splitlines()[0])
#include "k.cpp"
"""

from __future__ import annotations

from collections.abc import Sequence

RUN_SYMBOL = "tc_csim_run"
ERROR_SYMBOL = "tc_csim_error"


def harness_text(source_file: str, entry: str, storage_types: Sequence[str]) -> str:
    """The harness calling ``entry`` of ``source_file`` with one pointer per parameter, of the
    element types ``storage_types``."""
    arguments = ", ".join(f"static_cast<{ctype}*>(args[{index}])"
                          for index, ctype in enumerate(storage_types))
    return f"""#include "{source_file}"
#include <exception>
#include <string>

static std::string tc_csim_message;

#define TC_CSIM_EXPORT extern "C" __attribute__((visibility("default")))

TC_CSIM_EXPORT int {RUN_SYMBOL}(void** args) {{
    (void)args;
    try {{
        {entry}({arguments});
        return 0;
    }} catch (const std::exception& error) {{
        tc_csim_message = error.what();
        return -1;
    }}
}}

TC_CSIM_EXPORT const char* {ERROR_SYMBOL}(void) {{ return tc_csim_message.c_str(); }}
"""


__all__ = ["ERROR_SYMBOL", "RUN_SYMBOL", "harness_text"]
