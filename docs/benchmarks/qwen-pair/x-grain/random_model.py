"""The same comparison on the random-weight Q4_K_M model of tests/models/test_gguf.py (8 layers,
hidden 256, the test's 9 tokens): each row's largest logit difference from fp32 x, per grain.

usage: SPECDECODE_ISA=torch python random_model.py   (from the repository root)
"""
import sys
import tempfile
from pathlib import Path

import torch

sys.path[:0] = ["tests/models", "tests", str(Path(__file__).parent)]
import x_grain as X  # noqa: E402
from test_gguf import TOKENS  # noqa: E402

from specdecode.app.bench.synthetic import write_random_gguf  # noqa: E402
from specdecode.core.target import forward  # noqa: E402
from specdecode.kernels.torch_path import TorchKernels  # noqa: E402
from specdecode.models import load_model  # noqa: E402

path = write_random_gguf(Path(tempfile.mkdtemp()) / "k_m.gguf", layers=8, hidden=256, heads=4,
                         kv_heads=2, intermediate=512, qtype="Q4_K_M", context=256)
TorchKernels.pack, TorchKernels.linear = X.packing, X.rounding_linear
target = load_model(str(path)).target
logits = {}
for g in (None, *X.GRAINS):
    X.mode["grain"] = g
    logits[g] = forward(target, target.new_cache(), TOKENS)
print(f"largest |logit| {float(logits[None].abs().max()):.2f}; the test allows 3% of it")
for g in X.GRAINS:
    rows = (logits[g] - logits[None]).abs().amax(-1).tolist()
    print(f"x per {g}: each row's largest difference", " ".join(f"{v:.3f}" for v in rows))
