"""The small C++ file that turns one generated ``.cu`` into a callable emulation library: it
includes the source unchanged and exports ``tc_emulate_<entry>(void** args, gx, gy, gz, bx,
by, bz, dynamic_shared, seed)`` (0, or -1 with the message in ``tc_emulation_error()``).

>>> print(harness_text("k.cu", "add", 3).splitlines()[0])
#include "k.cu"
"""

from __future__ import annotations

#: the signature the runner calls through ctypes (see the module)
ENTRY_PREFIX = "tc_emulate_"
ERROR_SYMBOL = "tc_emulation_error"


def harness_text(source_file: str, entry: str, param_count: int) -> str:
    """The harness of the kernel ``entry`` of ``source_file``, whose ``param_count``
    parameters are pointers (each argument converts to the parameter's own pointer type)."""
    arguments = ", ".join(f"::tc_emu::Argument{{args[{index}]}}"
                          for index in range(param_count))
    return f"""#include "{source_file}"

static void tc_call_{entry}(void* argument) {{
  void** args = static_cast<void**>(argument);
  (void)args;
  {entry}({arguments});
}}

extern "C" int {ENTRY_PREFIX}{entry}(void** args, unsigned gx, unsigned gy, unsigned gz,
                                unsigned bx, unsigned by, unsigned bz,
                                size_t dynamic_shared, unsigned long long seed) {{
  return ::tc_emu::launch(dim3(gx, gy, gz), dim3(bx, by, bz), dynamic_shared, seed,
                          tc_call_{entry}, args);
}}

extern "C" const char* {ERROR_SYMBOL}(void) {{ return ::tc_emu::error_message(); }}
"""


__all__ = ["ENTRY_PREFIX", "ERROR_SYMBOL", "harness_text"]
