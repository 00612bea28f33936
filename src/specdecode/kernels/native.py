"""The C kernels of one instruction-set path, behind the `Kernels` interface."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..errors import KernelError
from ..quant import BLOCK, FORMATS, QuantTensor, decode, in_row_chunks
from .build import constants
from .layer import ACTIVATIONS, DecoderLayer, StackShape
from .torch_path import ROW_INVARIANT_ROWS, CacheRows, each_sequence, long_attention

_LINEAR = {torch.float32: "linear_f32", torch.bfloat16: "linear_bf16",
           torch.float16: "linear_f16"}
_KV = {torch.float32: 0, torch.float16: 1}  # a KV cache's dtype -> the kernel's kv_f16
# kernels.h: the decoder stack's record layout for `decoder_layers`
_C = constants()
STACK_HEADER, MAX_PARTS = _C["STACK_HEADER"], _C["MAX_PARTS"]
_KIND = {torch.float32: _C["PART_F32"], torch.bfloat16: _C["PART_BF16"],
         torch.float16: _C["PART_F16"]}  # a matrix part's kind; _BLOCKS + f: block format f
_BLOCKS = _C["PART_BLOCKS"]


# kernels.h: the codes a kernel returns besides 0
_STATUS = {1: "arguments it does not take", 2: "no memory for its scratch"}


def _check(status: int, kernel: str) -> None:
    """Every kernel call's status, checked in every build mode (an assert vanishes under -O and
    would hand on an uninitialised output)."""
    if status:
        raise KernelError(f"kernel {kernel} failed with status {status} "
                          f"({_STATUS.get(status, 'unknown')})")


def _require(condition: bool, kernel: str, what: str) -> None:
    """Sizes a kernel is called with, checked before C reads memory by them."""
    if not condition:
        raise KernelError(f"kernel {kernel}: {what}")


def _check_rope(kernel: str, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                rows: int, d: int) -> None:
    """The rotary tables cover every position C will read a row of them at."""
    _require(cos.shape == sin.shape and cos.dim() == 2 and cos.shape[1] == d
             and cos.is_contiguous() and sin.is_contiguous(), kernel,
             f"rotary tables {tuple(cos.shape)} for heads of {d}")
    _require(positions.dtype == torch.int64 and positions.is_contiguous()
             and tuple(positions.shape) == (rows,), kernel,
             f"positions {tuple(positions.shape)} for {rows} rows")
    _require(rows == 0 or 0 <= int(positions.min()) and int(positions.max()) < cos.shape[0],
             kernel, f"a position outside the rotary tables' {cos.shape[0]} rows")


@dataclass(frozen=True, eq=False)
class BlockPanels:
    """A weight in GGUF block format number `format` of the library, packed as `csrc/qlinear.c`
    lays it out."""

    format: int
    data: torch.Tensor  # uint8: the panels' super-blocks, one after the other
    in_features: int


@dataclass(frozen=True, eq=False)
class Stack:
    """A model's decoder layers described for `decoder_layers` (kernels.h: addresses of its
    weights, so `held` keeps the tensors alive), with its sizes."""

    numbers: torch.Tensor  # int64: STACK_HEADER, then a record per layer
    held: list
    shape: StackShape
    tables: int  # how many rotary tables its layers name


@dataclass(frozen=True, eq=False)
class _Caches:
    """A step's `CacheRows` as the attention kernel reads them: per sequence, its caches'
    addresses, capacity, start, rows and mask address (0: causal), one int64 array each."""

    caches: Sequence[CacheRows]
    masks: list  # the contiguous masks whose addresses `arrays` holds
    arrays: torch.Tensor  # [6, sequences] int64
    pointers: list[int]  # the address of each of its rows


# output rows packed at a time (a multiple of every path's lanes): the temporaries of a chunk stay
# in cache, and the chunks go to threads (numpy works without the GIL); a 1.5B model's output
# layer packed whole took seconds
PACK_ROWS = 1024


def pack_blocks(t: QuantTensor, lanes: int) -> np.ndarray:
    """A matrix in one of quant.FORMATS -> the bytes of its panels of `lanes` output rows
    (`csrc/qlinear.c`): per panel and super-block, the lanes' scale fields, then per block of 32
    the integers u in groups of 4 consecutive k per lane."""
    assert PACK_ROWS % lanes == 0, lanes  # a chunk's panels are whole: chunks concatenate
    return in_row_chunks(lambda start, stop: _pack_panels(t.take(slice(start, stop)), lanes),
                         t.out_features, PACK_ROWS)


def _pack_panels(t: QuantTensor, lanes: int) -> np.ndarray:
    """`pack_blocks` of one chunk of rows."""
    fmt, decoded = FORMATS[t.qtype], decode(t)
    O, I = t.shape
    P, supers, per_super = -(-O // lanes), I // fmt.values, fmt.values // BLOCK

    def panels(a: np.ndarray) -> np.ndarray:  # [O, ...] -> [P, lanes, ...], the rows past O zero
        a = np.pad(a, [(0, P * lanes - O)] + [(0, 0)] * (a.ndim - 1))
        return a.reshape(P, lanes, *a.shape[1:])

    header = []
    for name, _, count in fmt.fields:  # each field: count vectors of the lanes' values
        field = panels(decoded.fields[name].reshape(O, supers, count))  # [P, lanes, S, count]
        header.append(np.ascontiguousarray(field.transpose(0, 2, 3, 1)).view(np.uint8)
                      .reshape(P, supers, -1))
    u = panels(decoded.u.reshape(O, supers, per_super, 2, 4, 4))  # k = 16 half + 4 g + j
    u = u.transpose(0, 2, 3, 4, 5, 1, 6)  # [P, S, block, half, g, lanes, j]
    lo, hi = u[:, :, :, 0], u[:, :, :, 1]  # [P, S, block, g, lanes, j]
    shifts = np.arange(4, dtype=np.uint8)[:, None, None]  # by g
    if fmt.bits == 8:  # vector 2 g + half: whole bytes
        vectors = [u.transpose(0, 1, 2, 4, 3, 5, 6)]
    elif fmt.bits == 3:  # the low two bits of lo, then of hi, at bits 2 g, 2 g + 1; the third
        # bits as the 5-bit formats keep their fifth
        vectors = [_or_over_groups((half & 3) << (2 * shifts)) for half in (lo, hi)]
        vectors.append(_or_over_groups((((lo >> 2) & 1) << shifts)
                                       | (((hi >> 2) & 1) << (shifts + 4))))
    else:
        vectors = [(lo & 15) | ((hi & 15) << 4)]
        if fmt.bits == 5:  # byte j: the fifth bits of lo at bit g, of hi at bit 4 + g
            vectors.append(_or_over_groups((((lo >> 4) & 1) << shifts)
                                           | (((hi >> 4) & 1) << (shifts + 4))))
        elif fmt.bits == 6:  # bits 4, 5 of lo, then of hi, at bits 2 g, 2 g + 1
            vectors += [_or_over_groups(((half >> 4) & 3) << (2 * shifts)) for half in (lo, hi)]
    payload = [v.reshape(P, supers, per_super, -1) for v in vectors]
    payload = np.concatenate(payload, axis=-1).reshape(P, supers, -1)
    return np.ascontiguousarray(np.concatenate([*header, payload], axis=-1)).reshape(-1)


def _or_over_groups(a: np.ndarray) -> np.ndarray:
    """[P, S, block, g, lanes, j] -> the bitwise or over g: four slices or-ed (numpy's
    reduce along so short an inner axis took most of a 1.5B model's load)"""
    return a[:, :, :, 0] | a[:, :, :, 1] | a[:, :, :, 2] | a[:, :, :, 3]


class CKernels:
    """Kernels from a library built by `build` (or anything with its functions and signatures).

    Weights are packed in panels of `lanes` output rows (the vector width of the path)."""

    invariant_rows = None  # linear, norm and SwiGLU calls of any length compute a row alike

    def __init__(self, library, build_id: str = "") -> None:
        self._library = library
        # which build of the sources and flags (`build.build`'s key): what a measured cost of
        # its steps holds for
        self.build_id = build_id
        self.name: str = library.kernel_isa().decode()
        self.threading: str = library.kernel_threading().decode()
        self.lanes: int = library.kernel_lanes()
        self.formats: dict[str, int] = {}  # GGUF block formats the library computes in
        while (name := library.kernel_format(len(self.formats))) is not None:
            self.formats[name.decode()] = len(self.formats)

    def fits(self, head_dim: int, widths: tuple[int, ...]) -> bool:
        """True when a model with these head and row widths runs on this path (multiples of 16)."""
        return head_dim % 16 == 0 and all(w % 16 == 0 for w in widths)

    def pack(self, w: torch.Tensor | QuantTensor) -> torch.Tensor | BlockPanels:
        """w: [O, I] fp32, bf16 or fp16 -> panels [ceil(O / lanes), I, lanes] (panel p, column k holds
        w[lanes p .. lanes p + lanes - 1, k]), the rows past O zero: the layout `linear` reads.
        A GGUF matrix in a block format the kernels compute in -> `BlockPanels`; F16 -> fp16
        panels; another format -> its numbers in fp32."""
        if isinstance(w, QuantTensor):
            if w.qtype in self.formats:
                packed = torch.from_numpy(pack_blocks(w, self.lanes))
                return BlockPanels(self.formats[w.qtype], packed, w.in_features)
            if w.qtype == "F16":  # the kernels widen fp16 in registers, exactly
                return self.pack(torch.from_numpy(np.asarray(w.data).view(np.float16)))
            return self.pack(w.dequantize())
        _require(w.dtype in _LINEAR, "linear", f"no kernel for {w.dtype} weights")
        O, I = w.shape
        padded = w.new_zeros(-(-O // self.lanes) * self.lanes, I)
        padded[:O] = w
        return padded.view(-1, self.lanes, I).transpose(1, 2).contiguous()

    def linear(self, x: torch.Tensor, panels: torch.Tensor | BlockPanels,
               out_features: int) -> torch.Tensor:
        """x: [T, I] fp32, panels: `pack(w)` of w [out_features, I] -> x @ w.T: [T, O] fp32."""
        T, I = x.shape
        if isinstance(panels, BlockPanels):
            _require(panels.in_features == I, "linear",
                     f"x has {I} features, the weight {panels.in_features}")
            function, data = "linear_quant", panels.data
        else:
            _require(panels.shape[1:] == (I, self.lanes), "linear",
                     f"x {tuple(x.shape)} does not fit panels {tuple(panels.shape)}")
            function, data = _LINEAR[panels.dtype], panels
        _require(x.dtype == torch.float32, "linear", f"x is {x.dtype}, not float32")
        x = x.contiguous()
        y = torch.empty(T, out_features, dtype=torch.float32)
        if T:
            quant = (panels.format,) if isinstance(panels, BlockPanels) else ()
            status = getattr(self._library, function)(
                x.data_ptr(), data.data_ptr(), y.data_ptr(), T, I, out_features, *quant,
                torch.get_num_threads())
            _check(status, function)
        return y

    def instruction_peak(self, seconds: float = 0.2) -> float:
        """`kernel_peak` (csrc/peak.c) timed: the best of 5 runs of about `seconds` / 5 each,
        sized by a short first one."""
        threads, iterations = torch.get_num_threads(), 1 << 14
        while True:  # grow the run until the clock can time it
            started = time.perf_counter()
            self._library.kernel_peak(iterations, threads)
            if time.perf_counter() - started > 0.01:
                break
            iterations *= 4
        iterations = max(1, int(iterations * seconds / 5 / (time.perf_counter() - started)))
        best = 0.0
        for _ in range(5):
            started = time.perf_counter()
            macs = self._library.kernel_peak(iterations, threads)
            best = max(best, macs / (time.perf_counter() - started))
        return best

    def read_bandwidth(self, data: torch.Tensor) -> float:
        """`kernel_read` (csrc/peak.c) over `data` (contiguous, a multiple of 4 bytes, far larger
        than the caches), timed after one untimed pass: bytes a second."""
        nbytes, threads = data.numel() * data.element_size(), torch.get_num_threads()
        self._library.kernel_read(data.data_ptr(), nbytes, threads)
        started = time.perf_counter()
        self._library.kernel_read(data.data_ptr(), nbytes, threads)
        return nbytes / (time.perf_counter() - started)

    def stack(self, shape: StackShape, layers: Sequence[DecoderLayer]) -> Stack | None:
        """The decoder layers for `decoder_layers` (their weights' addresses, kernels.h). None
        where the library has no `decoder_layers` (the emulated neon driver of the tests) and
        for a mixture of experts (its routing runs in Python, each expert on these kernels)."""
        if getattr(self._library, "decoder_layers", None) is None or \
                any(layer.experts for layer in layers):
            return None
        scale_bits = int(np.array(shape.scale, dtype=np.float32).view(np.uint32))
        numbers = [shape.hidden, shape.heads, shape.kv_heads, shape.head_dim, shape.inner,
                   len(layers), ACTIVATIONS.index(shape.activation), scale_bits]
        held: list = []

        def address(t: torch.Tensor | None) -> int:
            if t is None:
                return 0
            held.append(t.contiguous())
            return held[-1].data_ptr()

        for layer in layers:
            numbers += [*map(address, layer.norms()), layer.window, layer.rope]
            for linear in layer.matrices():
                parts = linear.packed_parts()
                _require(len(parts) <= MAX_PARTS, "decoder_layers",
                         f"a matrix of {len(parts)} parts (at most {MAX_PARTS})")
                numbers += [linear.in_features, len(parts), address(linear.bias),
                            linear.out_features]
                for packed, rows in parts:
                    if isinstance(packed, BlockPanels):
                        numbers += [_BLOCKS + packed.format, rows, address(packed.data)]
                    else:
                        numbers += [_KIND[packed.dtype], rows, address(packed)]
                numbers += [0, 0, 0] * (MAX_PARTS - len(parts))
        tables = 1 + max((layer.rope for layer in layers), default=0)
        return Stack(torch.tensor(numbers, dtype=torch.int64), held, shape, tables)

    def decoder_layers(self, stack: Stack, x: torch.Tensor, caches: "_Caches",
                       layers: Sequence[int], tables: Sequence[tuple[torch.Tensor, torch.Tensor]],
                       positions: torch.Tensor, eps: float) -> torch.Tensor:
        """x: [T, hidden] fp32 through the stack's `layers` in one call (each sequence of the
        step with at most ROW_INVARIANT_ROWS rows) -> [T, hidden], a new tensor; the caches'
        new rows are written as `attention` writes them. tables: (cos, sin) per rotary table the
        layers name."""
        rows = caches.caches
        _require(all(c.rows <= ROW_INVARIANT_ROWS for c in rows), "decoder_layers",
                 f"a sequence brings more than {ROW_INVARIANT_ROWS} rows")
        _require(tuple(x.shape) == (sum(c.rows for c in rows), stack.shape.hidden),
                 "decoder_layers", f"x {tuple(x.shape)} does not match the rows and hidden size "
                 f"{stack.shape.hidden}")
        _require(len(tables) >= stack.tables, "decoder_layers",
                 f"{len(tables)} rotary tables for layers naming {stack.tables}")
        for cos, sin in tables:
            _check_rope("decoder_layers", cos, sin, positions, x.shape[0], rows[0].keys.shape[3])
        x = x.contiguous().clone()
        order = torch.tensor(list(layers), dtype=torch.int64)
        cos, sin = (torch.tensor([t[i].data_ptr() for t in tables], dtype=torch.int64)
                    for i in (0, 1))
        status = self._library.decoder_layers(
            x.data_ptr(), x.shape[0], stack.numbers.data_ptr(), order.data_ptr(), len(order),
            *caches.pointers, len(rows), cos.data_ptr(), sin.data_ptr(), len(tables),
            min(t[0].shape[0] for t in tables), positions.data_ptr(), eps,
            _KV[rows[0].keys.dtype], torch.get_num_threads())
        _check(status, "decoder_layers")
        return x

    def attention_inputs(self, caches: Sequence[CacheRows]) -> "_Caches":
        """What `attention` reads of a step's caches, made once for every layer of the step."""
        _require(all(c.mask is None or (c.mask.dtype == torch.bool and tuple(c.mask.shape)
                                        == (c.rows, c.start + c.rows)) for c in caches),
                 "attention", "a mask is not [rows, start + rows] bool")
        masks = [None if c.mask is None else c.mask.contiguous() for c in caches]  # held: read
        _require(all(c.keys.is_contiguous() and c.values.is_contiguous() for c in caches),
                 "attention", "a KV cache is not contiguous")
        dtypes = {c.keys.dtype for c in caches} | {c.values.dtype for c in caches}
        _require(len(dtypes) == 1 and caches[0].keys.dtype in _KV, "attention",
                 f"KV caches of {sorted(map(str, dtypes))} (one of float32, float16)")
        arrays = torch.tensor([[c.keys.data_ptr() for c in caches],
                               [c.values.data_ptr() for c in caches],
                               [c.keys.shape[2] for c in caches],
                               [c.start for c in caches], [c.rows for c in caches],
                               [0 if m is None else m.data_ptr() for m in masks]],
                              dtype=torch.int64)
        return _Caches(caches, masks, arrays, [row.data_ptr() for row in arrays])

    def attention(self, qkv: torch.Tensor, caches: "_Caches", layer: int, cos: torch.Tensor,
                  sin: torch.Tensor, positions: torch.Tensor, num_heads: int, window: int,
                  scale: float) -> torch.Tensor:
        """One layer's attention for the new rows of one or more sequences (see
        `Kernels.attention`): one call for all of them, or, when a sequence brings more than
        ROW_INVARIANT_ROWS rows (a long prefill), torch's batched attention for its rows."""
        rows = caches.caches
        if any(c.rows > ROW_INVARIANT_ROWS for c in rows):
            return each_sequence(
                lambda x, c, pos: self.attention(x, self.attention_inputs([c]), layer, cos, sin,
                                                 pos, num_heads, window, scale)
                if c.rows <= ROW_INVARIANT_ROWS
                else long_attention(x, c.keys[layer], c.values[layer], cos, sin, pos, c.mask,
                                    c.start, num_heads, window, scale), qkv, rows, positions)
        G, d = rows[0].keys.shape[1], rows[0].keys.shape[3]
        T = qkv.shape[0]
        _require(qkv.is_contiguous() and qkv.shape[1] == (num_heads + 2 * G) * d, "attention",
                 f"qkv {tuple(qkv.shape)} for {num_heads} heads, {G} KV heads of {d}")
        _require(T == sum(c.rows for c in rows), "attention",
                 f"{T} rows of qkv for {sum(c.rows for c in rows)} cache rows")
        _check_rope("attention", cos, sin, positions, T, d)
        out = torch.empty(T, num_heads * d, dtype=torch.float32)
        status = self._library.attention(
            qkv.data_ptr(), *caches.pointers, len(rows), layer, cos.data_ptr(), sin.data_ptr(),
            cos.shape[0], positions.data_ptr(), out.data_ptr(), num_heads, G, d, window, scale,
            _KV[rows[0].keys.dtype], torch.get_num_threads())
        _check(status, "attention")
        return out

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x: [T, H], weight: [H] fp32 -> x / sqrt(mean(x²) + eps) · weight per row, [T, H]."""
        x, weight = x.contiguous(), weight.contiguous()
        out = torch.empty_like(x)
        status = self._library.rms_norm(x.data_ptr(), weight.data_ptr(), out.data_ptr(),
                                        x.shape[0], x.shape[1], eps)
        _check(status, "rms_norm")
        return out

    def head_norm(self, qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                  num_heads: int, num_kv_heads: int, eps: float) -> torch.Tensor:
        """qkv: [T, (H + 2 G) d] -> a copy with each q head normed by q_weight [d] and each k
        head by k_weight [d], as `rms_norm` norms a row; the v heads as they were."""
        d = q_weight.shape[0]
        _require(qkv.dim() == 2 and qkv.shape[1] == (num_heads + 2 * num_kv_heads) * d
                 and tuple(k_weight.shape) == (d,), "head_norm",
                 f"qkv {tuple(qkv.shape)} for {num_heads} + 2 x {num_kv_heads} heads of {d}")
        out = qkv.contiguous().clone()
        q_weight, k_weight = q_weight.contiguous(), k_weight.contiguous()
        status = self._library.head_norm(out.data_ptr(), q_weight.data_ptr(), k_weight.data_ptr(),
                                         out.shape[0], num_heads, num_kv_heads, d, eps)
        _check(status, "head_norm")
        return out

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up: [T, 2 I] = [gate; up] per row -> silu(gate) · up, [T, I]."""
        return self._gated(gate_up, "silu_mul")

    def gelu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up: [T, 2 I] = [gate; up] per row -> gelu(gate) · up (tanh form), [T, I]."""
        return self._gated(gate_up, "gelu_mul")

    def _gated(self, gate_up: torch.Tensor, kernel: str) -> torch.Tensor:
        gate_up = gate_up.contiguous()
        T, width = gate_up.shape
        out = torch.empty(T, width // 2, dtype=torch.float32)
        status = getattr(self._library, kernel)(gate_up.data_ptr(), out.data_ptr(), T, width // 2)
        _check(status, kernel)
        return out
