"""Running generated OpenCL C through pyopencl: :mod:`.device` (the one context of the process
and what its device offers), :mod:`.program` (builds, cached, with a BuildError carrying the
log and the source path), :mod:`.launch` (a built kernel called with numpy arrays)."""
