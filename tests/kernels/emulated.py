"""The `neon` kernels on an x86 machine: the library cross-compiled for aarch64 with Debian's
gcc-aarch64-linux-gnu, linked into `neon_driver.c` and run under qemu-aarch64 (Debian's
qemu-user). `EmulatedLibrary` has the library's functions with their pointer arguments and ships
each call to the driver, so `kernels.native.CKernels` and every kernel test run on it unchanged."""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np

from specdecode.kernels import build
from specdecode.quant import panel_bytes

CROSS_COMPILER, EMULATOR = "aarch64-linux-gnu-gcc", "qemu-aarch64"
DRIVER = Path(__file__).with_name("neon_driver.c")
INSTALL = "apt-get install gcc-aarch64-linux-gnu qemu-user"


def missing_tools() -> list[str]:
    return [tool for tool in (CROSS_COMPILER, EMULATOR) if shutil.which(tool) is None]


def start_driver(out: Path, path: str = "neon") -> subprocess.Popen:
    """Start compiling the driver with the kernels of an ARM path (neon, neondot) into `out`,
    statically linked (qemu then needs no aarch64 libc); `finish_driver` waits for it. Each takes
    most of a minute on a slow x86 core: the paths' drivers compile side by side."""
    sources = sorted(build.SOURCES.glob("*.c"))
    command = [CROSS_COMPILER, *build.OPTIMIZE, *build.FLAGS[path], "-fopenmp", "-static",
               f"-I{build.SOURCES}", *map(str, sources), str(DRIVER), "-o", str(out), "-lm"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_driver(compiling: subprocess.Popen, out: Path) -> Path:
    """The driver `start_driver` compiles into `out`, once compiled."""
    _, errors = compiling.communicate()
    assert compiling.returncode == 0, errors
    return out


def _read(pointer: int, count: int, dtype) -> bytes:
    return ctypes.string_at(pointer, count * np.dtype(dtype).itemsize)


class EmulatedLibrary:
    """The kernel library's functions (same arguments as kernels.h), run by the driver."""

    def __init__(self, driver: Path) -> None:
        # the "max" CPU has every extension qemu emulates, the dot products among them
        self._process = subprocess.Popen([EMULATOR, "-cpu", "max", str(driver)],
                                         stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE)
        self._send(struct.pack("<i", 0))
        self._status()
        self.lanes = struct.unpack("<i", self._receive(4))[0]
        names = self._receive(32)
        self.isa, self.threading = (names[i : i + 16].rstrip(b"\0") for i in (0, 16))

    def close(self) -> None:
        self._process.stdin.close()
        self._process.wait(timeout=10)

    def _send(self, data: bytes) -> None:
        self._process.stdin.write(data)

    def _receive(self, count: int) -> bytes:
        data = self._process.stdout.read(count)
        assert len(data) == count, "the emulated driver stopped"
        return data

    def _status(self) -> int:
        self._process.stdin.flush()
        return struct.unpack("<i", self._receive(4))[0]

    def _answer(self, pointer: int, count: int, dtype=np.float32) -> None:
        data = self._receive(count * np.dtype(dtype).itemsize)
        ctypes.memmove(pointer, data, len(data))

    def kernel_isa(self) -> bytes:
        return self.isa

    def kernel_threading(self) -> bytes:
        return self.threading

    def kernel_lanes(self) -> int:
        return self.lanes

    def _linear(self, op: int, x, w, y, T, I, O, threads, weight_bytes: int,
                format: int = -1) -> int:
        self._send(struct.pack("<i6q", op, T, I, O, threads, weight_bytes, format)
                   + _read(x, T * I, np.float32) + ctypes.string_at(w, weight_bytes))
        status = self._status()
        self._answer(y, T * O)
        return status

    def _panels(self, O: int) -> int:
        return -(-O // self.lanes) * self.lanes

    def linear_f32(self, x, w, y, T, I, O, threads) -> int:
        return self._linear(1, x, w, y, T, I, O, threads, self._panels(O) * I * 4)

    def linear_bf16(self, x, w, y, T, I, O, threads) -> int:
        return self._linear(2, x, w, y, T, I, O, threads, self._panels(O) * I * 2)

    def linear_f16(self, x, w, y, T, I, O, threads) -> int:
        return self._linear(6, x, w, y, T, I, O, threads, self._panels(O) * I * 2)

    def linear_quant(self, x, w, y, T, I, O, format, threads) -> int:
        return self._linear(7, x, w, y, T, I, O, threads,
                            panel_bytes(self.kernel_format(format).decode(), I, self._panels(O)),
                            format)

    def kernel_format(self, format: int) -> bytes | None:
        self._send(struct.pack("<iq", 8, format))
        status = self._status()
        name = self._receive(16).rstrip(b"\0")
        return name if status == 0 else None

    def kernel_peak(self, iterations: int, threads: int) -> int:
        self._send(struct.pack("<i2q", 9, iterations, threads))
        self._status()
        return struct.unpack("<q", self._receive(8))[0]

    def kernel_read(self, data, nbytes: int, threads: int) -> int:
        self._send(struct.pack("<i2q", 12, nbytes, threads)
                   + (ctypes.string_at(data, nbytes) if nbytes > 0 else b""))
        self._status()
        return struct.unpack("<q", self._receive(8))[0]

    def attention(self, qkv, keys, values, capacity, starts, rows, masks, S, layer, cos, sin,
                  rope_rows, positions, out, H, G, d, window, scale, kv_f16, threads) -> int:
        """Ships the layer's part of each cache; the driver runs it as a one-layer cache."""
        def ints(pointer: int) -> list[int]:
            return np.frombuffer(_read(pointer, S, np.int64), np.int64).tolist()

        keys, values, capacity, starts, rows, masks = map(
            ints, (keys, values, capacity, starts, rows, masks))
        kv = np.float16 if kv_f16 else np.float32
        layer_bytes = [layer * G * c * d * np.dtype(kv).itemsize for c in capacity]
        keys = [k + offset for k, offset in zip(keys, layer_bytes)]
        values = [v + offset for v, offset in zip(values, layer_bytes)]
        T = sum(rows)
        # the rows the positions read (the driver's attention checks them against rope_rows)
        read = np.frombuffer(_read(positions, T, np.int64), np.int64)
        shipped = int(min(max(read.max(), 0) + 1, rope_rows)) if T else 0
        width = (H + 2 * G) * d
        message = [struct.pack("<i10qf", 3, S, H, G, d, kv_f16, threads, shipped, rope_rows, T,
                               window, scale)]
        for s in range(S):
            message.append(struct.pack("<4q", starts[s], rows[s], capacity[s], masks[s] != 0))
        message.append(_read(qkv, T * width, np.float32))
        for s in range(S):
            cache = G * capacity[s] * d
            message += [_read(keys[s], cache, kv), _read(values[s], cache, kv)]
            if masks[s]:
                message.append(_read(masks[s], rows[s] * (starts[s] + rows[s]), np.uint8))
        message += [_read(cos, shipped * d, np.float32), _read(sin, shipped * d, np.float32),
                    _read(positions, T, np.int64)]
        self._send(b"".join(message))
        status = self._status()
        self._answer(out, T * H * d)
        self._answer(qkv, T * width)
        for s in range(S):
            self._answer(keys[s], G * capacity[s] * d, kv)
            self._answer(values[s], G * capacity[s] * d, kv)
        return status

    def rms_norm(self, x, w, out, T, H, eps) -> int:
        self._send(struct.pack("<i2qf", 4, T, H, eps) + _read(x, T * H, np.float32)
                   + _read(w, H, np.float32))
        status = self._status()
        self._answer(out, T * H)
        return status

    def silu_mul(self, gate_up, out, T, I) -> int:
        return self._gated(5, gate_up, out, T, I)

    def gelu_mul(self, gate_up, out, T, I) -> int:
        return self._gated(10, gate_up, out, T, I)

    def _gated(self, op: int, gate_up, out, T, I) -> int:
        self._send(struct.pack("<i2q", op, T, I) + _read(gate_up, T * 2 * I, np.float32))
        status = self._status()
        self._answer(out, T * I)
        return status

    def head_norm(self, qkv, q_w, k_w, T, H, G, d, eps) -> int:
        width = (H + 2 * G) * d
        self._send(struct.pack("<i4qf", 11, T, H, G, d, eps) + _read(qkv, T * width, np.float32)
                   + _read(q_w, d, np.float32) + _read(k_w, d, np.float32))
        status = self._status()
        self._answer(qkv, T * width)
        return status
