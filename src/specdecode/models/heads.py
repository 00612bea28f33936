"""Learned drafting heads (trainable torch modules) and their files.

Both read the target's final-normed hidden states h (what its LM head reads) and reuse the target's
frozen embedding and LM head, so a head file holds only the new weights (a few MB in bf16).

- EAGLE (Li et al. 2024): a feature-level autoregressive head. For position t,
      ĥ_{t+1} = Layer(W_fc [e(x_{t+1}); h_t]),   q(x_{t+2}) = softmax(LMHead(ĥ_{t+1}))
  where e is the target's embedding and Layer one Llama decoder layer without its input norm (as
  EAGLE-1), attending causally over the earlier pairs. Drafting feeds ĥ back in place of h.
- Medusa (Cai et al. 2024): K residual heads on h_t, head k predicting x_{t+1+k}:
      q_k(x_{t+1+k}) = softmax(LMHead(h_t + SiLU(W_k h_t + b_k))).
Optionally the draft distributions cover only `draft_vocab` (the most frequent tokens, as FR-Spec and
EAGLE-3): the LM-head rows for those ids, cutting the head's largest cost on a 49k vocabulary.

A head is saved as a directory: `config.json` (kind, sizes, target) + `model.safetensors`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ModelLoadError
from ..rope import rotate

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


class _DecoderLayer(nn.Module):
    """A Llama decoder layer without input norm, for training (full causal attention over [B, T])."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        H, d = cfg["hidden_size"], cfg["head_dim"]
        self.heads, self.kv_heads, self.head_dim = cfg["num_attention_heads"], cfg["num_key_value_heads"], d
        self.eps = cfg["rms_norm_eps"]
        self.self_attn = nn.ModuleDict({
            "q_proj": nn.Linear(H, self.heads * d, bias=False),
            "k_proj": nn.Linear(H, self.kv_heads * d, bias=False),
            "v_proj": nn.Linear(H, self.kv_heads * d, bias=False),
            "o_proj": nn.Linear(self.heads * d, H, bias=False),
        })
        self.post_attention_layernorm = nn.Parameter(torch.ones(H))
        I = cfg["intermediate_size"]
        self.mlp = nn.ModuleDict({
            "gate_proj": nn.Linear(H, I, bias=False),
            "up_proj": nn.Linear(H, I, bias=False),
            "down_proj": nn.Linear(I, H, bias=False),
        })

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x: [B, T, H]; cos, sin: [T, d] -> [B, T, H]"""
        B, T, _ = x.shape
        a = self.self_attn

        def heads(t: torch.Tensor, n: int) -> torch.Tensor:  # [B, T, n d] -> [B, n, T, d]
            return t.view(B, T, n, self.head_dim).transpose(1, 2)

        q = rotate(heads(a["q_proj"](x), self.heads), cos, sin)
        k = rotate(heads(a["k_proj"](x), self.kv_heads), cos, sin)
        v = heads(a["v_proj"](x), self.kv_heads)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + a["o_proj"](o.transpose(1, 2).reshape(B, T, -1))
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.post_attention_layernorm
        m = self.mlp
        return x + m["down_proj"](F.silu(m["gate_proj"](h)) * m["up_proj"](h))


class _Head(nn.Module):
    """What both kinds keep: their config (saved as config.json) and the draft vocabulary
    ([V'] token ids; empty: the full vocabulary)."""

    kind: str

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        self.cfg = dict(cfg)
        self.register_buffer("draft_vocab", torch.tensor(cfg.get("draft_vocab") or [], dtype=torch.long),
                             persistent=False)


class EagleHead(_Head):
    kind = "eagle"

    def __init__(self, cfg: dict) -> None:
        super().__init__(cfg)
        H = cfg["hidden_size"]
        self.fc = nn.Linear(2 * H, H, bias=False)  # no bias: the layout vLLM's EAGLE-1 loads
        self.layers = nn.ModuleList([_DecoderLayer(cfg)])

    def forward(self, hidden: torch.Tensor, next_embeds: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        """hidden h_t: [B, T, H], next_embeds e(x_{t+1}): [B, T, H], cos/sin of positions 0..T-1:
        [T, d] -> predicted features ĥ_{t+1}: [B, T, H]"""
        return self.layers[0](self.fc(torch.cat([next_embeds, hidden], dim=-1)), cos, sin)


class MedusaHeads(_Head):
    kind = "medusa"

    def __init__(self, cfg: dict) -> None:
        super().__init__(cfg)
        H = cfg["hidden_size"]
        self.heads = nn.ModuleList([nn.Linear(H, H) for _ in range(cfg["num_heads"])])
        for head in self.heads:  # start as the identity residual: head k first predicts x_{t+1}
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden h_t: [..., H] -> per-head features h_t + SiLU(W_k h_t + b_k): [K, ..., H]"""
        return torch.stack([hidden + F.silu(head(hidden)) for head in self.heads])


HEADS = {cls.kind: cls for cls in (EagleHead, MedusaHeads)}


def save_head(head: nn.Module, path: str | Path, meta: dict | None = None) -> Path:
    """Write `head` as path/config.json + path/model.safetensors (bf16)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = {"kind": head.kind, **head.cfg, **(meta or {})}
    tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in head.state_dict().items()}
    save_file(tensors, str(path / WEIGHTS_FILE))
    (path / CONFIG_FILE).write_text(json.dumps(config, indent=1) + "\n")
    return path


def load_head(path: str | Path, kind: str | None = None) -> nn.Module:
    """Read a head directory written by `save_head` (weights as float32); check its kind."""
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / CONFIG_FILE).is_file() or not (path / WEIGHTS_FILE).is_file():
        raise ModelLoadError(f"{path} is not a drafting head (needs {CONFIG_FILE} and {WEIGHTS_FILE})")
    config = json.loads((path / CONFIG_FILE).read_text())
    if config.get("kind") not in HEADS or (kind and config["kind"] != kind):
        raise ModelLoadError(f"{path} holds a {config.get('kind')!r} head, not {kind or 'a known kind'}")
    head = HEADS[config["kind"]](config)
    head.load_state_dict({k: v.float() for k, v in load_file(str(path / WEIGHTS_FILE)).items()})
    return head.eval()
