"""xgrammar against llguidance on this project's vocabularies: the one-time tokenizer set-up, the
compile time of a typical schema (cold: a fresh compiler), and the time per token of the mask that
constrained decoding needs at every position (fill the bitmask, then advance by the token), over a
valid JSON answer tokenized by the model's own tokenizer. Medians over repeats.

    .venv/bin/python docs/benchmarks/grammar/choose.py > docs/benchmarks/grammar/choose.txt
"""

from __future__ import annotations

import json
import platform
import statistics
import time

import llguidance
import llguidance.hf
import llguidance.torch
import torch
import xgrammar as xgr

from specdecode.models.loader import _load_tokenizer_and_config, _resolve

SCHEMA = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string"},
        "date": {"type": "string"},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"]},
        "customer": {"type": "object", "properties": {
            "name": {"type": "string"}, "street": {"type": "string"},
            "city": {"type": "string"}, "postal_code": {"type": "string"}},
            "required": ["name", "street", "city", "postal_code"], "additionalProperties": False},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "description": {"type": "string"}, "quantity": {"type": "integer"},
            "unit_price": {"type": "number"}},
            "required": ["description", "quantity", "unit_price"], "additionalProperties": False}},
        "paid": {"type": "boolean"},
    },
    "required": ["invoice_number", "date", "currency", "customer", "items", "paid"],
    "additionalProperties": False,
}
ANSWER = {"invoice_number": "INV-2026-0412", "date": "2026-03-14", "currency": "EUR",
          "customer": {"name": "Bäckerei Müller GmbH", "street": "Hauptstraße 12",
                       "city": "Berlin", "postal_code": "10115"},
          "items": [{"description": "Rye flour, 25 kg", "quantity": 4, "unit_price": 18.5},
                    {"description": "Delivery", "quantity": 1, "unit_price": 12.0}],
          "paid": False}
REPEATS = 5


def median_time(fn, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def xgrammar_case(tok, vocab: int, eos: int, tokens: list[int]) -> dict:
    t0 = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab, stop_token_ids=[eos])
    setup = time.perf_counter() - t0
    schema = json.dumps(SCHEMA)
    compile_s = median_time(lambda: xgr.GrammarCompiler(info, cache_enabled=False)
                            .compile_json_schema(schema, any_whitespace=False))
    grammar = xgr.GrammarCompiler(info).compile_json_schema(schema, any_whitespace=False)
    mask = xgr.allocate_token_bitmask(1, vocab)

    def walk() -> None:
        m = xgr.GrammarMatcher(grammar)
        for t in tokens:
            m.fill_next_token_bitmask(mask)
            assert m.accept_token(t), t
        m.fill_next_token_bitmask(mask)
        assert m.accept_token(eos)

    return {"setup_s": setup, "compile_s": compile_s,
            "mask_us_per_token": 1e6 * median_time(walk) / (len(tokens) + 1)}


def llguidance_case(tok, vocab: int, eos: int, tokens: list[int]) -> dict:
    t0 = time.perf_counter()
    lt = llguidance.hf.from_tokenizer(tok, n_vocab=vocab, eos_token=eos)
    setup = time.perf_counter() - t0
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        SCHEMA, defaults={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "})
    # llguidance compiles lazily: the matcher's construction is its compile step
    compile_s = median_time(lambda: llguidance.LLMatcher(lt, grammar, log_level=0))
    mask = llguidance.torch.allocate_token_bitmask(1, vocab)

    def walk() -> None:
        m = llguidance.LLMatcher(lt, grammar, log_level=0)
        for t in tokens:
            llguidance.torch.fill_next_token_bitmask(m, mask, 0)
            assert m.consume_token(t), (t, m.get_error())
        llguidance.torch.fill_next_token_bitmask(m, mask, 0)
        assert m.consume_token(eos)

    # the walk includes the matcher's construction: subtract it
    per = (median_time(walk) - compile_s) / (len(tokens) + 1)
    return {"setup_s": setup, "compile_s": compile_s, "mask_us_per_token": 1e6 * per}


def main() -> None:
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}")
    for name in ("smollm2-135m", "qwen2.5-coder-1.5b"):
        source, _, _ = _resolve(name)
        tok, config = _load_tokenizer_and_config(source, name)
        vocab = config.vocab_size
        eos = tok.convert_tokens_to_ids("<|im_end|>")
        tokens = tok(json.dumps(ANSWER, ensure_ascii=False),
                     add_special_tokens=False)["input_ids"]
        for lib, case in (("xgrammar", xgrammar_case), ("llguidance", llguidance_case)):
            row = case(tok, vocab, eos, tokens)
            print(f"{name:20s} vocab {vocab:6d} {lib:10s} tokenizer set-up {row['setup_s']:6.2f} s"
                  f"  schema compile {1e3 * row['compile_s']:7.1f} ms"
                  f"  mask + advance {row['mask_us_per_token']:7.1f} us/token"
                  f" ({len(tokens) + 1} tokens)")


if __name__ == "__main__":
    main()
