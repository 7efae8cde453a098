"""Builds the C kernels in csrc/ at first use and loads them with ctypes.

No torch headers and no build step at install: a kernel is one C file that gcc compiles (and
then links, without -ffast-math: see LINK_FLAGS) in well under a second into a shared library,
cached under $STEPWISE_KERNELS_DIR (default ~/.cache/stepwise/kernels) by a hash of its
sources, flags, compiler and this CPU's feature flags (`-march=native` code from one CPU may
not run on another that reuses the cache).
Where no compiler is found or the build fails, `load` returns None once, logs why, and the
callers keep their torch references.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from pipeline.config import runtime

log = logging.getLogger(__name__)

CSRC = Path(__file__).with_name("csrc")
DEFAULT_DIR = Path("~/.cache/stepwise/kernels")
FLAGS = (  # compiling
    "-O3",
    "-march=native",
    "-ffast-math",
    "-fno-strict-aliasing",
    "-fopenmp",
    "-fPIC",
    "-Wall",
)
# Linking is a step of its own, without -ffast-math: gcc links crtfastmath.o into anything it
# links with that flag, and its constructor sets flush-to-zero / denormals-are-zero in the
# thread that loads the library: the whole process's floats then lose their subnormals (seen:
# msgspec's `gt=0.0` check let 0.0 through, hypothesis refused to draw floats).
LINK_FLAGS = ("-shared", "-fopenmp")
BUILD_TIMEOUT_S = 120


def kernels_dir() -> Path:
    return Path(runtime().kernels_dir or DEFAULT_DIR).expanduser()


def extra_flags() -> list[str]:
    """$STEPWISE_KERNELS_CFLAGS, appended to FLAGS (e.g. -mno-avx512f: the portable loops)."""
    return runtime().kernels_cflags.split()


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return os.uname().machine


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags as /proc/cpuinfo lists them (empty where it lists none); read
    once: prepacking asks per linear (cpu_linear.has_amx)."""
    line = _cpu_flags()
    return frozenset(line.split(":", 1)[1].split()) if line.startswith("flags") else frozenset()


def _build_key(name: str, cc: str) -> str:
    h = hashlib.sha256()
    for src in sorted(CSRC.iterdir()):  # every source: headers are shared between kernels
        h.update(src.name.encode())
        h.update(src.read_bytes())
    h.update(" ".join((cc, *FLAGS, *extra_flags(), *LINK_FLAGS, _cpu_flags())).encode())
    return h.hexdigest()[:16]


def build(name: str) -> Path:
    """Compile csrc/<name>.c (and the headers it includes) unless cached; returns the library.

    Raises RuntimeError with the compiler's output when it fails.
    """
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (gcc or cc) on PATH; set CC to use one")
    out = kernels_dir() / f"{name}-{_build_key(name, cc)}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # Build under temporary names, then rename: workers starting together may build at once.
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".so.tmp")
    os.close(fd)
    obj = tmp + ".o"
    try:
        compile_cmd = [cc, *FLAGS, *extra_flags(), "-c", "-o", obj, str(CSRC / f"{name}.c")]
        link_cmd = [cc, *LINK_FLAGS, "-o", tmp, obj, "-lm"]
        for cmd in (compile_cmd, link_cmd):
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()}")
        os.replace(tmp, out)
    finally:
        for path in (tmp, obj):
            if os.path.exists(path):
                os.unlink(path)
    return out


# Element types the C kernels are built for, and the suffix of each entry point.
SUFFIXES = {"float32": "f32", "bfloat16": "bf16"}


@functools.cache
def load(name: str) -> ctypes.CDLL | None:
    """The built library csrc/<name>.c, or None (logged once) where it cannot be built."""
    try:
        import torch  # noqa: F401  (its libgomp must be loaded first: see csrc/*.c)

        return ctypes.CDLL(str(build(name)))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        log.warning("CPU kernel %s unavailable, using the torch reference: %s", name, exc)
        return None


def is_built(name: str) -> bool:
    return load(name) is not None


def entry(name: str, function: str, dtype) -> ctypes._CFuncPtr:
    """The C function `<function>_<f32|bf16>` of library `name` for a torch dtype."""
    lib = load(name)
    if lib is None:
        raise RuntimeError(f"the C kernel {name} could not be built (see the log)")
    return getattr(lib, f"{function}_{SUFFIXES[str(dtype).removeprefix('torch.')]}")


def ptr(t) -> ctypes.c_void_p:
    """A tensor's data pointer, for a C argument."""
    return ctypes.c_void_p(t.data_ptr())
