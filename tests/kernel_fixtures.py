"""`kernel_path`: every kernel path, as the tests run it on this machine.

C paths the CPU runs are built and loaded; `generic-pthreads` is the portable path built without
OpenMP (the library's own thread pool, as with Apple's clang); `neon` runs natively on 64-bit ARM
and, elsewhere, emulated (tests/kernels/emulated.py) when the cross compiler and qemu are installed.
A path that cannot run here is skipped with the reason (`make test` lists the reasons); with
SPECDECODE_TEST_NEON=required (set by .ci/run) the emulated neon path must run."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from specdecode import kernels
from specdecode.kernels.native import CKernels

KERNEL_PATHS = ["avx512amx", "avx512vnni", "avx512", "avx2vnni", "avx2", "neondot", "neon",
                "generic", "generic-pthreads", "torch"]
ARM_PATHS = ("neondot", "neon")  # emulated where the machine is not ARM


@pytest.fixture(scope="session")
def emulated_arm(tmp_path_factory):
    """path -> its kernels, run by the driver under qemu (each built once per session)."""
    # by its path: a top-level `kernels` may be another package (transformers >= 5.25 installs
    # Hugging Face's `kernels`), which would shadow the tests' folder of that name
    spec = importlib.util.spec_from_file_location(
        "specdecode_tests_emulated", Path(__file__).parent / "kernels" / "emulated.py")
    emulated_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(emulated_module)
    INSTALL, EmulatedLibrary = emulated_module.INSTALL, emulated_module.EmulatedLibrary
    start_driver, finish_driver = emulated_module.start_driver, emulated_module.finish_driver
    missing_tools = emulated_module.missing_tools

    missing = missing_tools()
    if missing:
        # CI installs the tools (.ci/run) and sets this: there a missing tool is a failure
        skip_or_fail = pytest.fail if os.environ.get("SPECDECODE_TEST_NEON") == "required" \
            else pytest.skip
        skip_or_fail(f"neon: no ARM CPU here and {' and '.join(missing)} missing to emulate one "
                    f"({INSTALL})")
    libraries: dict[str, EmulatedLibrary] = {}
    # every ARM path's driver compiling at once, each on a core: the tests wait for the first
    # either way, and the second is ready when its tests come
    outputs = {path: tmp_path_factory.mktemp(path) / "driver" for path in ARM_PATHS}
    compiling = {path: start_driver(out, path) for path, out in outputs.items()}

    def emulated(path: str) -> CKernels:
        if path not in libraries:
            libraries[path] = EmulatedLibrary(finish_driver(compiling[path], outputs[path]))
        return CKernels(libraries[path])

    yield emulated
    for library in libraries.values():
        library.close()
    for process in compiling.values():
        if process.poll() is None:  # a driver no test asked for, still compiling
            process.kill()
            process.communicate()


@pytest.fixture(scope="session", params=KERNEL_PATHS)
def kernel_path(request) -> kernels.Kernels:
    name, openmp = request.param.removesuffix("-pthreads"), not request.param.endswith("-pthreads")
    here = kernels.runnable()
    if name in ARM_PATHS and name not in here:
        return request.getfixturevalue("emulated_arm")(name)
    if name not in here:
        pytest.skip(f"{name}: this machine runs only {', '.join(here)}")
    return kernels.load(name, openmp)
