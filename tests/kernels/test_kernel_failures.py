"""What the C kernels do with input they cannot compute: non-finite activations give a defined
result, and arguments a kernel refuses stop the call with a `KernelError` in every build mode
(`python -O` included), never an uninitialised output."""

import ctypes
import subprocess
import sys

import numpy as np
import pytest
import torch

from specdecode.errors import KernelError
from specdecode.quant import QuantTensor, random_blocks


def random_quant(qtype: str, outputs: int, inputs: int, seed: int) -> QuantTensor:
    return QuantTensor(qtype, random_blocks(qtype, outputs, inputs, np.random.default_rng(seed)),
                       inputs)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K", "Q6_K"])
def test_a_nan_or_inf_activation_makes_its_rows_outputs_nan_and_no_other_rows(kernel_path, qtype):
    """A block of x holding NaN or inf would be converted to int8 from NaN (undefined behaviour
    in C); the kernels make that row's outputs NaN, as fp32 arithmetic would, and every other
    row's bits stay what they are alone."""
    if kernel_path.name == "torch":
        pytest.skip("torch: no C quantization")
    w = random_quant(qtype, 37, 256, seed=3)
    panels = kernel_path.pack(w)
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(4))
    x[1, 7], x[2, 200], x[3, 0] = float("nan"), float("inf"), -float("inf")
    y = kernel_path.linear(x, panels, 37)
    assert y[1:].isnan().all()
    assert torch.equal(y[0], kernel_path.linear(x[:1], panels, 37)[0])
    assert torch.isfinite(y[0]).all()


def test_a_kernel_that_refuses_its_arguments_raises_a_kernel_error(kernel_path):
    if kernel_path.name == "torch":
        pytest.skip("torch: no C kernels")
    # rms_norm takes rows of a multiple of 16 values: the C kernel returns 1 for 15
    with pytest.raises(KernelError, match=r"kernel rms_norm failed with status 1 \(arguments"):
        kernel_path.rms_norm(torch.randn(2, 15), torch.ones(15), 1e-6)
    with pytest.raises(KernelError, match="x has 64 features, the weight 256"):
        kernel_path.linear(torch.randn(1, 64), kernel_path.pack(random_quant("Q8_0", 16, 256, 1)),
                           16)


def test_decoder_layers_refuses_a_layer_index_outside_its_stack(kernel_path):
    """The layer count travels in the stack's header, so an index from elsewhere (a file, a
    layer-skip set) cannot make C read past the stack: the call fails before it reads any
    weight or cache (every address here is null)."""
    library = getattr(kernel_path, "_library", None)
    if getattr(library, "decoder_layers", None) is None:
        pytest.skip(f"{kernel_path.name}: no decoder_layers")
    stack = torch.tensor([64, 4, 2, 16, 128, 2, 0, 0], dtype=torch.int64)  # 2 layers, no records
    x = torch.zeros(1, 64)
    for index in (2, -1):
        layers = torch.tensor([index], dtype=torch.int64)
        status = library.decoder_layers(x.data_ptr(), 1, stack.data_ptr(), layers.data_ptr(), 1,
                                        *[0] * 6, 1, 0, 0, 1, 4, 0, ctypes.c_float(1e-6), 1,
                                        1)
        assert status == 1


def test_kernel_failures_are_errors_under_python_O():
    """Asserts vanish under -O; the kernels' checks must not."""
    code = ("import torch, specdecode.kernels as k\n"
            "from specdecode.errors import KernelError\n"
            "path = k.load(k.runnable()[0], True)\n"
            "try:\n"
            "    path.rms_norm(torch.randn(2, 15), torch.ones(15), 1e-6)\n"
            "except KernelError as e:\n"
            "    print('refused:', e)\n")
    done = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "refused: kernel rms_norm failed with status 1" in done.stdout


def test_attention_refuses_a_position_beyond_its_rotary_tables(kernel_path):
    """C reads a row of the cos and sin tables at each position: one past their end would be a
    read outside them."""
    if kernel_path.name == "torch":
        pytest.skip("torch: no C kernels")
    from specdecode.kernels.torch_path import CacheRows

    H, G, d, T = 2, 1, 16, 2
    keys, values = torch.zeros(1, G, 8, d), torch.zeros(1, G, 8, d)
    caches = kernel_path.attention_inputs([CacheRows(keys, values, 0, T, None)])
    cos, sin = torch.ones(4, d), torch.zeros(4, d)
    qkv = torch.randn(T, (H + 2 * G) * d)
    assert kernel_path.attention(qkv, caches, 0, cos, sin, torch.tensor([2, 3]), H, 0,
                                 d ** -0.5).shape == (T, H * d)
    with pytest.raises(KernelError, match="a position outside the rotary tables' 4 rows"):
        kernel_path.attention(qkv, caches, 0, cos, sin, torch.tensor([3, 4]), H, 0, d ** -0.5)


def test_attention_refuses_a_mask_that_does_not_cover_its_rows_and_keys(kernel_path):
    """C reads a row's mask at rows x (start + rows) bytes: a smaller mask would be read past."""
    if kernel_path.name == "torch":
        pytest.skip("torch: no C kernels")
    from specdecode.kernels.torch_path import CacheRows

    keys, values = torch.zeros(1, 1, 8, 16), torch.zeros(1, 1, 8, 16)
    short = torch.ones(2, 3, dtype=torch.bool)  # 2 rows after 2 cached keys need [2, 4]
    with pytest.raises(KernelError, match=r"a mask is not \[rows, start \+ rows\] bool"):
        kernel_path.attention_inputs([CacheRows(keys, values, 2, 2, short)])


def test_the_attention_kernel_itself_refuses_a_position_outside_its_rotary_tables(kernel_path):
    """The size check in C, behind the Python one: called directly with a position one past the
    tables' rows, the kernel returns 1 and writes nothing."""
    library = getattr(kernel_path, "_library", None)
    if library is None:
        pytest.skip("torch: no C kernels")
    H, G, d, T = 2, 1, 16, 1
    qkv = torch.randn(T, (H + 2 * G) * d)
    before = qkv.clone()
    keys, values = torch.zeros(G, 8, d), torch.zeros(G, 8, d)
    cos, sin = torch.ones(4, d), torch.zeros(4, d)
    out = torch.zeros(T, H * d)
    arrays = [torch.tensor([t.data_ptr()], dtype=torch.int64) for t in (keys, values)]
    capacity, starts, rows = (torch.tensor([n], dtype=torch.int64) for n in (8, 0, T))
    masks = torch.zeros(1, dtype=torch.int64)
    for position, expected in ((4, 1), (-1, 1), (3, 0)):
        positions = torch.tensor([position])  # held: C reads it
        status = library.attention(qkv.data_ptr(), arrays[0].data_ptr(), arrays[1].data_ptr(),
                                   capacity.data_ptr(), starts.data_ptr(), rows.data_ptr(),
                                   masks.data_ptr(), 1, 0, cos.data_ptr(), sin.data_ptr(), 4,
                                   positions.data_ptr(), out.data_ptr(), H, G, d, 0,
                                   0.25, 0, 1)
        assert status == expected
        if expected:
            assert torch.equal(qkv, before) and not keys.any()
