"""Compiling the C kernels (`csrc/`) for one instruction-set path, and loading them.

Which paths the machine runs is asked of the compiler, not of /proc/cpuinfo (which only Linux
has): `cc -march=native -dM -E` (`-mcpu=native` where the compiler wants that) lists the macros
it predefines for the host CPU, such as `__AVX512F__`, `__AVX2__` or `__ARM_NEON`; AMX is also
asked of the OS, which must grant a process the tiles' register state. Each path is
then compiled with the flags of its own instruction set only, so that `avx2` built on an AVX-512
machine is what an AVX2-only machine runs. Libraries are cached under `cache_dir()/kernels`,
keyed by the sources, the compiler and the flags; building one removes those no build has used
for 30 days (`UNUSED_DAYS`). `SPECDECODE_CFLAGS` adds flags to every
build (CI's sanitizer job: `-fsanitize=address,undefined`), keyed like the rest.

The exported functions and their ctypes signatures come from one header, `csrc/kernels.h`, and
so do the constants of the contract between C and Python (`constants`: the stack's record
layout, the kinds of a matrix part, the row-invariance rule).
"""

from __future__ import annotations

import ast
import ctypes
import functools
import hashlib
import operator
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..storage import cache_dir

SOURCES = Path(__file__).parent / "csrc"
HEADER = SOURCES / "kernels.h"
# by preference
C_PATHS = ("avx512amx", "avx512vnni", "avx512", "avx2vnni", "avx2", "neondot", "neon", "generic")
_VNNI = ["-DSPECDECODE_AVX512", "-DSPECDECODE_VNNI", "-mavx512f", "-mavx512bw", "-mavx512vnni",
         "-mavx2", "-mfma", "-mf16c"]
# the path's instruction set and nothing else of the host's
FLAGS = {
    "avx512amx": [*_VNNI, "-DSPECDECODE_AMX", "-mamx-tile", "-mamx-int8"],
    "avx512vnni": _VNNI,
    "avx512": ["-DSPECDECODE_AVX512", "-mavx512f", "-mavx512bw", "-mavx2", "-mfma", "-mf16c"],
    "avx2vnni": ["-DSPECDECODE_AVX2", "-DSPECDECODE_VNNI", "-mavx2", "-mfma", "-mf16c",
                 "-mavxvnni"],
    "avx2": ["-DSPECDECODE_AVX2", "-mavx2", "-mfma", "-mf16c"],
    "neondot": ["-DSPECDECODE_NEON", "-DSPECDECODE_DOTPROD", "-march=armv8.2-a+dotprod"],
    "neon": ["-DSPECDECODE_NEON"],
    "generic": [],
}
# macros the compiler predefines for the host CPU when it runs the path
REQUIRES = {
    "avx512amx": ("__AVX512F__", "__AVX512BW__", "__AVX512VNNI__", "__AMX_TILE__", "__AMX_INT8__"),
    "avx512vnni": ("__AVX512F__", "__AVX512BW__", "__AVX512VNNI__"),
    "avx512": ("__AVX512F__", "__AVX512BW__"),
    "avx2vnni": ("__AVX2__", "__FMA__", "__F16C__", "__AVXVNNI__"),
    "avx2": ("__AVX2__", "__FMA__", "__F16C__"),
    "neondot": ("__aarch64__", "__ARM_NEON", "__ARM_FEATURE_DOTPROD"),
    "neon": ("__aarch64__", "__ARM_NEON"),
    "generic": (),
}
# -ffp-contract=off: a * b + c is never fused in one inlined copy of a loop and not in another
OPTIMIZE = ["-O3", "-ffp-contract=off"]
LIBRARY_FLAGS = [*OPTIMIZE, "-fPIC", "-shared"]
EXTRA_FLAGS_VARIABLE = "SPECDECODE_CFLAGS"


class BuildError(Exception):
    """The kernels could not be built here; the message is one line."""


def compiler() -> str | None:
    """The C compiler: `CC`, else cc, gcc or clang on the PATH; None if there is none."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


@functools.cache
def host_macros(cc: str) -> frozenset[str] | None:
    """Macros `cc` predefines when compiling for this machine's CPU; None if `cc` does not run."""
    for native in (["-march=native"], ["-mcpu=native"], []):
        try:
            result = subprocess.run([cc, *native, "-dM", "-E", "-x", "c", os.devnull],
                                    capture_output=True, text=True)
        except OSError:
            return None
        if result.returncode == 0:
            return frozenset(line.split()[1] for line in result.stdout.splitlines()
                             if line.startswith("#define "))
    return None


def runnable_paths(cc: str) -> list[str]:
    """The C paths this machine's CPU runs, best first (empty when `cc` does not work)."""
    macros = host_macros(cc)
    if macros is None:
        return []
    return [path for path in C_PATHS if all(m in macros for m in REQUIRES[path])
            and (path != "avx512amx" or os_grants_amx())]


@functools.cache
def os_grants_amx() -> bool:
    """True when the OS gives this process AMX's tile state (Linux does only when asked, once per
    process: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); the kernels ask again and take
    their vector tile if refused."""
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1023, 18
    return libc.syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0


def build(path: str, cc: str, openmp: bool = True) -> Path:
    """The shared library of `path` (built on first use, then cached); with OpenMP if asked and
    the compiler has it, else with the library's own thread pool."""
    sources = sorted(SOURCES.glob("*.c"))
    headers = sorted(SOURCES.rglob("*.h"))
    attempts = [["-fopenmp"], []] if openmp else [[]]
    failures = []
    for threading in attempts:
        flags = [*LIBRARY_FLAGS, *FLAGS[path], *threading,
                 *os.environ.get(EXTRA_FLAGS_VARIABLE, "").split()]
        key = hashlib.sha256(b"".join(f.read_bytes() for f in sources + headers)
                             + " ".join([cc, _version(cc), *flags]).encode()).hexdigest()[:16]
        library = cache_dir() / "kernels" / f"{path}-{key}.so"
        failed = library.with_suffix(".failed")
        if library.exists():
            os.utime(library)  # its time is its last use (`_remove_unused`)
            return library
        if failed.exists():
            failures.append(failed.read_text().strip())
            continue
        library.parent.mkdir(parents=True, exist_ok=True)
        partial = library.with_suffix(f".{os.getpid()}.tmp")  # renamed into place when whole
        command = [cc, *flags, *map(str, sources), "-o", str(partial), "-lm",
                   *([] if threading else ["-lpthread"])]
        try:
            result = subprocess.run(command, capture_output=True, text=True)
        except OSError as exc:  # CC names no program
            raise BuildError(str(exc)) from exc
        if result.returncode == 0:
            os.replace(partial, library)
            _remove_unused(library.parent)
            return library
        lines = result.stderr.strip().splitlines()
        failures.append(lines[-1] if lines else f"exit code {result.returncode}")
        if threading:  # without OpenMP here: remember, the next start builds without it at once
            failed.write_text(failures[-1] + "\n")
    raise BuildError(failures[-1])


UNUSED_DAYS = 30  # a library not used for this long is removed when another is built


def _remove_unused(directory: Path) -> None:
    """Remove the libraries (and failed-build markers) no build has used for UNUSED_DAYS: every
    change of the sources, compiler or flags builds a new one (a 1 MB library a path and an
    upgrade), and another checkout or version may still use the recent ones."""
    oldest = time.time() - UNUSED_DAYS * 86400
    for entry in [*directory.glob("*.so"), *directory.glob("*.failed")]:
        try:
            if entry.stat().st_mtime < oldest:
                entry.unlink()
        except OSError:  # another process removed it first
            pass


def build_id(library: Path) -> str:
    """The key of sources, compiler and flags a library `build` made was built from."""
    return library.stem.rpartition("-")[2]


@functools.cache
def _version(cc: str) -> str:
    result = subprocess.run([cc, "--version"], capture_output=True, text=True)
    return (result.stdout.splitlines() or [""])[0]


_C_TYPES = {"int": ctypes.c_int, "int64_t": ctypes.c_int64, "float": ctypes.c_float}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


@functools.cache
def constants(header: Path = HEADER) -> dict[str, int]:
    """The header's integer constants: each `#define NAME value` whose value is integers and
    earlier such names joined by + - * and parentheses, and each enumerator given a value."""
    text = re.sub(r"/\*.*?\*/", " ", header.read_text(), flags=re.S)
    found: dict[str, int] = {}

    def value(node: ast.expr) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            return found[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
        raise KeyError(ast.dump(node))

    for name, expression in re.findall(r"^[ \t]*#define[ \t]+(\w+)[ \t]+(.+?)[ \t]*$", text,
                                       flags=re.M):
        try:
            found[name] = value(ast.parse(expression, mode="eval").body)
        except (SyntaxError, KeyError):
            continue  # not an integer constant (a macro of another kind)
    for body in re.findall(r"\benum\b[^{;]*{([^}]*)}", text):
        found.update((name, int(number)) for name, number in
                     re.findall(r"(\w+)\s*=\s*(\d+)", body))
    return found


def signatures(header: Path = HEADER) -> dict[str, tuple[object, list]]:
    """name -> (restype, argtypes) of every prototype in the header: pointers become c_void_p,
    `const char *` results c_char_p."""
    text = re.sub(r"/\*.*?\*/", " ", header.read_text(), flags=re.S)
    text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)
    found = {}
    for result, name, params in re.findall(r"([\w \t*]+?)\s*\b(\w+)\s*\(([^()]*)\)\s*;", text):
        restype = ctypes.c_char_p if "*" in result else _C_TYPES[result.split()[-1]]
        argtypes = []
        for param in params.split(","):
            words = param.replace("*", " * ").split()
            if words and words != ["void"]:
                argtypes.append(ctypes.c_void_p if "*" in words else _C_TYPES[words[-2]])
        found[name] = (restype, argtypes)
    return found


def load(library: Path) -> ctypes.CDLL:
    """The library with the header's signatures set on its functions."""
    loaded = ctypes.CDLL(str(library))
    for name, (restype, argtypes) in signatures().items():
        function = getattr(loaded, name)
        function.restype, function.argtypes = restype, argtypes
    return loaded
