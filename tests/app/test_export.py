"""`export_head`: an EAGLE head written in either layout computes what the head computes when
loaded the way its reader loads it.

Neither reader can run here (vLLM needs a GPU; the speculators releases with an EAGLE-1 class need
transformers < 5.11), so each is rebuilt from its source:

- `VllmEagle`: vLLM's `EagleLlamaForCausalLM` / `LlamaModel` (vllm/model_executor/models/
  llama_eagle.py): config.json read as a transformers LlamaConfig, `fc` without bias, vLLM's Llama
  decoder layer with stacked `qkv_proj` / `gate_up_proj`, an Identity input norm and the fused
  residual, and its `load_weights` (stacked shards, `embed_tokens` skipped, any other unknown name
  a KeyError); embedding shared from the target afterwards, as the proposer does.
- `SpeculatorsEagle`: speculators' `EagleSpeculator` with `layernorms=False`: `fusion_fc`,
  `transformer` (transformers' LlamaDecoderLayer, input norm Identity), strict state-dict load.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from specdecode.app.cli import main
from specdecode.app.export import export_head
from specdecode.errors import InvalidParameterError, ModelLoadError, SpecDecodeError
from specdecode.models.heads import EagleHead, MedusaHeads, load_head, save_head

LAYER = {"hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
         "intermediate_size": 32, "rms_norm_eps": 1e-5}
THETA = 500.0  # not the default 10000: checks that the verifier's rotary base is carried over
VOCAB = 50
VERIFIER = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16,
            "vocab_size": VOCAB, "max_position_embeddings": 64, "bos_token_id": 1,
            "eos_token_id": 2, "rope_parameters": {"rope_type": "default", "rope_theta": THETA}}


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class VllmEagle(nn.Module):
    """vLLM's EAGLE-1 draft model (llama_eagle.py `LlamaModel`) for one sequence: parameter names,
    weight loading and forward as there; attention and rotary as vLLM's Llama (neox rotary)."""

    def __init__(self, out_dir) -> None:
        from transformers import AutoConfig

        super().__init__()
        c = self.config = AutoConfig.from_pretrained(str(out_dir))  # what vLLM reads
        H, I = c.hidden_size, c.intermediate_size
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or H // self.heads
        self.q_size, self.kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        self.theta = c.rope_parameters["rope_theta"]
        self.embed_tokens = nn.Embedding(c.vocab_size, H)  # replaced by the target's
        self.layers = nn.ModuleList()
        for _ in range(c.num_hidden_layers):
            layer = nn.Module()  # input_layernorm: Identity, no parameter
            layer.self_attn = nn.Module()
            layer.self_attn.qkv_proj = nn.Linear(H, self.q_size + 2 * self.kv_size, bias=False)
            layer.self_attn.o_proj = nn.Linear(self.q_size, H, bias=False)
            layer.post_attention_layernorm = nn.Module()
            layer.post_attention_layernorm.weight = nn.Parameter(torch.ones(H))
            layer.mlp = nn.Module()
            layer.mlp.gate_up_proj = nn.Linear(H, 2 * I, bias=False)
            layer.mlp.down_proj = nn.Linear(I, H, bias=False)
            self.layers.append(layer)
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.shards = {"q": (0, self.q_size), "k": (self.q_size, self.kv_size),
                       "v": (self.q_size + self.kv_size, self.kv_size), 0: (0, I), 1: (I, I)}

    def load_weights(self, weights: dict[str, torch.Tensor]) -> set[str]:
        """`EagleLlamaForCausalLM.load_weights` (prefix `model.` unless lm_head), then
        `LlamaModel.load_weights`."""
        stacked = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"),
                   (".qkv_proj", ".v_proj", "v"), (".gate_up_proj", ".gate_proj", 0),
                   (".gate_up_proj", ".up_proj", 1)]
        params = dict(self.named_parameters())
        loaded = set()
        for name, weight in weights.items():
            # EagleLlamaForCausalLM puts `model.` before all but lm_head; AutoWeightsLoader
            # strips it again when it hands the names to LlamaModel.load_weights
            assert "lm_head" not in name
            for param_name, weight_name, shard in stacked:
                if weight_name in name:
                    name = name.replace(weight_name, param_name)
                    start, size = self.shards[shard]
                    param = params[name]
                    assert weight.shape == (size, param.shape[1]), name
                    param.data[start:start + size] = weight
                    break
            else:
                if "embed_tokens." in name:  # shared with the target (no pipeline parallelism)
                    continue
                param = params[name]  # KeyError for a name vLLM's model does not have
                assert weight.shape == param.shape, name
                param.data.copy_(weight)
            loaded.add(name)
        return loaded

    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """input_ids [T], the target's hidden states [T, H] -> draft features [T, H]"""
        T, eps = input_ids.shape[0], self.config.rms_norm_eps
        x = self.fc(torch.cat((self.embed_tokens(input_ids), hidden), dim=-1))
        residual = None
        for layer in self.layers:
            if residual is None:  # input_layernorm is Identity
                residual = x
            else:
                x = x + residual
                residual = x
            qkv = layer.self_attn.qkv_proj(x)
            q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            q = self.rotary(q.view(T, self.heads, self.head_dim))
            k = self.rotary(k.view(T, self.kv_heads, self.head_dim))
            v = v.view(T, self.kv_heads, self.head_dim)
            o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                               v.transpose(0, 1), is_causal=True, enable_gqa=True)
            x = layer.self_attn.o_proj(o.transpose(0, 1).reshape(T, -1))
            residual = x + residual  # fused add + RMSNorm
            x = rms(residual, layer.post_attention_layernorm.weight, eps)
            gate, up = layer.mlp.gate_up_proj(x).chunk(2, dim=-1)
            x = layer.mlp.down_proj(F.silu(gate) * up)
        return x + residual

    def rotary(self, x: torch.Tensor) -> torch.Tensor:
        """neox-style rotary of positions 0..T-1. x: [T, n, d]"""
        d = x.shape[-1]
        inv_freq = 1.0 / self.theta ** (torch.arange(0, d, 2).float() / d)
        freqs = torch.outer(torch.arange(x.shape[0]).float(), inv_freq)[:, None]
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * freqs.cos() - x2 * freqs.sin(), x2 * freqs.cos() + x1 * freqs.sin()],
                         dim=-1)


class SpeculatorsEagle(nn.Module):
    """The EAGLE-1 speculator as speculators builds it (layernorms=False), minus the verifier's
    embedding and LM head: features in, features out."""

    def __init__(self, config: dict) -> None:
        from transformers import AutoConfig
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        super().__init__()
        layer_config = AutoConfig.for_model(**config["transformer_layer_config"])
        layer_config._attn_implementation = "eager"
        H = layer_config.hidden_size
        self.fusion_fc = nn.Linear(2 * H, H, bias=config["fusion_bias"])
        self.transformer = LlamaDecoderLayer(layer_config, layer_idx=0)
        self.transformer.input_layernorm = nn.Identity()
        self.rotary_emb = LlamaRotaryEmbedding(layer_config)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        x = self.fusion_fc(torch.cat([embeds, hidden], dim=-1))
        T = x.shape[1]
        positions = torch.arange(T)[None]
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
        out = self.transformer(x, attention_mask=mask, position_ids=positions,
                               position_embeddings=self.rotary_emb(x, positions))
        return out[0] if isinstance(out, tuple) else out


def rope(T: int, d: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2).float() / d)
    freqs = torch.outer(torch.arange(T).float(), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def random_head(seed: int, **extra) -> EagleHead:
    torch.manual_seed(seed)
    head = EagleHead({**LAYER, **extra})
    with torch.no_grad():
        for p in head.parameters():  # norms away from 1 too, so a dropped norm weight shows
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
    return head.eval()


@pytest.fixture
def exported_head(tmp_path):
    """(head as trained, head dir, inputs: token ids [B, T], target embedding, hidden [B, T, H])"""
    head = random_head(0)
    save_head(head, tmp_path / "head", {"target": "test-verifier"})
    torch.manual_seed(1)
    B, T, H = 2, 7, LAYER["hidden_size"]
    ids, embedding = torch.randint(0, VOCAB, (B, T)), nn.Embedding(VOCAB, H)
    return head, tmp_path / "head", ids, embedding, torch.randn(B, T, H)


def head_outputs(head, head_dir, embeds, hidden):
    """(the stored head's output, same bf16 weights; the trained head's, float weights)"""
    cos, sin = rope(embeds.shape[1], LAYER["head_dim"], THETA)
    with torch.no_grad():
        return (load_head(head_dir, "eagle")(hidden, embeds, cos, sin),
                head(hidden, embeds, cos, sin))


def test_vllm_layout_computes_the_head(tmp_path, exported_head):
    head, head_dir, ids, embedding, hidden = exported_head
    out = export_head(head_dir, tmp_path / "out", "org/verifier", verifier_config=VERIFIER)

    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 1
    assert config["vocab_size"] == VOCAB and config["max_position_embeddings"] == 64
    assert config["rope_theta"] == THETA and config["rope_parameters"]["rope_theta"] == THETA
    # EAGLEConfig's renaming for method "eagle" -> the class registered from llama_eagle.py
    assert [a if a.startswith("Eagle") else f"Eagle{a}" for a in config["architectures"]] == \
        ["EagleLlamaForCausalLM"]

    weights = load_file(str(out / "model.safetensors"))
    assert all(t.dtype == torch.bfloat16 for t in weights.values())
    assert sorted(weights) == sorted(
        ["fc.weight", "layers.0.post_attention_layernorm.weight"]
        + [f"layers.0.self_attn.{p}_proj.weight" for p in "qkvo"]
        + [f"layers.0.mlp.{p}_proj.weight" for p in ("gate", "up", "down")])
    model = VllmEagle(out)
    loaded = model.load_weights({k: v.float() for k, v in weights.items()})
    assert loaded == {n for n, _ in model.named_parameters()} - {"embed_tokens.weight"}
    model.embed_tokens = embedding  # the proposer shares the target's embedding

    with torch.no_grad():
        got = torch.stack([model(ids[b], hidden[b]) for b in range(ids.shape[0])])
    stored, trained = head_outputs(head, head_dir, embedding(ids).detach(), hidden)
    torch.testing.assert_close(got, stored, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got, trained, rtol=0.05, atol=0.05)


def test_speculators_layout_computes_the_head(tmp_path, exported_head):
    head, head_dir, ids, embedding, hidden = exported_head
    out = export_head(head_dir, tmp_path / "out", "org/verifier", format="speculators",
                      verifier_config=VERIFIER, speculative_tokens=3)

    config = json.loads((out / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle"
    assert config["layernorms"] is False and config["fusion_bias"] is False
    spec = config["speculators_config"]
    assert spec["algorithm"] == "eagle" and spec["proposal_methods"][0]["speculative_tokens"] == 3
    assert spec["verifier"] == {"name_or_path": "org/verifier",
                                "architectures": ["LlamaForCausalLM"]}
    layer = config["transformer_layer_config"]
    assert layer["num_hidden_layers"] == 1 and layer["vocab_size"] == VOCAB
    assert layer["rope_theta"] == THETA and layer["rope_parameters"]["rope_theta"] == THETA

    weights = load_file(str(out / "model.safetensors"))
    assert all(t.dtype == torch.bfloat16 for t in weights.values())
    assert not any(k.startswith(("embed_tokens", "lm_head")) or "input_layernorm" in k
                   for k in weights)
    model = SpeculatorsEagle(config)
    model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=True)

    embeds = embedding(ids).detach()
    with torch.no_grad():
        got = model(embeds, hidden)
    stored, trained = head_outputs(head, head_dir, embeds, hidden)
    torch.testing.assert_close(got, stored, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got, trained, rtol=0.05, atol=0.05)


def test_draft_vocabulary_is_dropped_with_a_warning(tmp_path, caplog):
    save_head(random_head(0, draft_vocab=[3, 4, 5]), tmp_path / "head")
    export_head(tmp_path / "head", tmp_path / "out", verifier_config=VERIFIER)
    assert "drafts over 3 tokens" in caplog.text and "all 50" in caplog.text


def test_user_mistakes_are_one_line_errors(tmp_path):
    def fails(error, match, head_dir, **kwargs):
        kwargs.setdefault("verifier_config", VERIFIER)
        with pytest.raises(error, match=match) as info:
            export_head(head_dir, tmp_path / "out", "x/y", **kwargs)
        assert "\n" not in str(info.value)

    (tmp_path / "empty").mkdir()
    fails(ModelLoadError, "not a drafting head", tmp_path / "empty")
    save_head(MedusaHeads({"hidden_size": 16, "num_heads": 2}), tmp_path / "medusa")
    fails(ModelLoadError, "'medusa' head", tmp_path / "medusa")
    save_head(random_head(0), tmp_path / "head")
    fails(ModelLoadError, "hidden size 16 but the verifier", tmp_path / "head",
          verifier_config={**VERIFIER, "hidden_size": 32})
    fails(InvalidParameterError, "unknown export format 'gguf'", tmp_path / "head", format="gguf")
    fails(InvalidParameterError, "num_speculative_tokens", tmp_path / "head", speculative_tokens=4)
    fails(InvalidParameterError, ">= 1", tmp_path / "head", format="speculators",
          speculative_tokens=0)
    # a head saved before the fc lost its bias: the key names reach the one line
    old = tmp_path / "old"
    save_head(random_head(0), old)
    weights = load_file(str(old / "model.safetensors"))
    save_file({**weights, "fc.bias": torch.zeros(16, dtype=torch.bfloat16)},
              str(old / "model.safetensors"))
    fails(ModelLoadError, "cannot read the EAGLE head.*fc.bias", old)
    assert not (tmp_path / "out").exists()
    with pytest.raises(SpecDecodeError, match="must differ"):
        export_head(tmp_path / "head", tmp_path / "head", verifier_config=VERIFIER)


def test_cli_export(tmp_path, capsys):
    """The verifier's config comes from the model the head was trained on (a local directory
    here); the hub id given with --verifier is what the speculators config names."""
    (tmp_path / "verifier").mkdir()
    (tmp_path / "verifier" / "config.json").write_text(json.dumps(VERIFIER))
    save_head(random_head(0), tmp_path / "head", {"target": str(tmp_path / "verifier")})
    code = main(["export", str(tmp_path / "head"), str(tmp_path / "vllm")])
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "vllm" / "config.json").read_text())["rope_theta"] == THETA
    assert "fc.weight" in load_file(str(tmp_path / "vllm" / "model.safetensors"))

    code = main(["export", str(tmp_path / "head"), str(tmp_path / "spec"), "--format",
                 "speculators", "--verifier", "org/verifier"])
    assert code == 0, capsys.readouterr().err
    config = json.loads((tmp_path / "spec" / "config.json").read_text())
    assert config["speculators_config"]["verifier"]["name_or_path"] == "org/verifier"
    assert config["transformer_layer_config"]["rope_theta"] == THETA
    capsys.readouterr()

    (tmp_path / "medusa").mkdir()
    for argv in (["export", str(tmp_path / "medusa"), str(tmp_path / "out2")],
                 ["export", str(tmp_path / "head"), str(tmp_path / "out3"),
                  "--speculative-tokens", "3"],
                 ["export", str(tmp_path / "head"), str(tmp_path / "out4"), "--format", "onnx"]):
        try:
            code = main(argv)
        except SystemExit as exc:  # argument errors exit from argparse
            code = exc.code
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("specdecode"), (argv, err)
