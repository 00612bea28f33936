"""Grammars for constrained generation, compiled by llguidance (`core.constraint` is the protocol
the engine uses; this module binds it to a grammar engine and a model's tokenizer).

Why llguidance: its masks cost a small share of a step, it compiles schemas lazily within limits
(an explosive one fails with a message), reads JSON schema, Lark and GBNF, and installs as one
wheel without triton (docs/benchmarks/grammar).

    compiler = grammar_compiler(model)
    grammar = compiler.json_schema({"type": "object", ...})
    sd.generate(prompt, grammar=grammar)
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

import llguidance
import llguidance.hf

from .core.constraint import Constraint, Grammar
from .errors import GrammarError

CACHED_GRAMMARS = 256  # compiled grammars kept per model, the least recently used dropped
# JSON as clients expect it from OpenAI: one space after ':' and ',' (the model's own habit, so
# its argmax lands inside the grammar more often), no other whitespace
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_LIMITS = llguidance.LLParserLimits(verbose_errors=False)


class LLConstraint(Constraint):
    """A llguidance matcher as the engine's `Constraint`. An EOS token where the grammar is
    complete ends the output: it is held here, not consumed by the matcher (whose rollback does
    not count it), and nothing but EOS follows it."""

    def __init__(self, matcher: llguidance.LLMatcher, eos_token_ids: frozenset[int]) -> None:
        self.matcher, self.eos_token_ids = matcher, eos_token_ids
        self.ended = 0  # EOS tokens accepted since the grammar completed

    def fill(self, masks, row: int) -> None:
        words = masks[row]
        if self.ended:
            words.zero_()
            for t in self.eos_token_ids:
                words[t // 32] |= _bit(t % 32)
            return
        self.matcher.unsafe_compute_mask_ptr(words.data_ptr(), words.numel() * 4)
        if self.matcher.is_error():
            raise GrammarError(f"the grammar failed: {self.matcher.get_error()}")

    def accept(self, token: int) -> bool:
        # try_consume_tokens leaves the matcher as it was when the token is forbidden
        # (consume_token would put it in its error state for good); it never takes EOS
        if token in self.eos_token_ids:
            if self.ended or self.matcher.is_accepting():
                self.ended += 1
                return True
            return False
        return not self.ended and self.matcher.try_consume_tokens([token]) == 1

    def rollback(self, tokens: int) -> None:
        held = min(tokens, self.ended)
        self.ended -= held
        if tokens > held:
            self.matcher.rollback(tokens - held)

    def forced(self) -> list[int]:
        return [] if self.ended else self.matcher.compute_ff_tokens()


def _bit(b: int) -> int:
    """Bit b of an int32 word, as a Python int that fits it (bit 31 is the sign)."""
    return (1 << b) - (1 << 32) if b == 31 else 1 << b


class LLGrammar(Grammar):
    """A checked llguidance grammar for one tokenizer."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, text: str,
                 eos_token_ids: frozenset[int]) -> None:
        self.tokenizer, self.text, self.eos_token_ids = tokenizer, text, eos_token_ids

    def matcher(self) -> LLConstraint:
        matcher = llguidance.LLMatcher(self.tokenizer, self.text, log_level=0, limits=_LIMITS)
        if matcher.is_error():
            raise GrammarError(f"the grammar cannot be used: {matcher.get_error()}")
        return LLConstraint(matcher, self.eos_token_ids)


class GrammarCompiler:
    """Grammars for one model's tokenizer, compiled once per text (`CACHED_GRAMMARS` kept).
    The tokenizer's set-up (1.7 s for a 151,936-token vocabulary) happens on first use."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: frozenset[int]) -> None:
        self.hf_tokenizer, self.vocab_size = tokenizer, vocab_size
        self.eos_token_ids = sorted(eos_token_ids)
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._cache: OrderedDict[tuple[str, str], LLGrammar] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._tokenizer is None:
                try:
                    self._tokenizer = llguidance.hf.from_tokenizer(
                        self.hf_tokenizer, n_vocab=self.vocab_size,
                        eos_token=self.eos_token_ids or None)
                except ValueError as exc:  # a slow (Python) tokenizer
                    raise GrammarError(f"grammars need a fast tokenizer: {exc}") from None
            return self._tokenizer

    def ready(self) -> "GrammarCompiler":
        """Set up the tokenizer now (it reads the model's tokenizer, which only one thread may
        use): compiling from other threads is safe after this. A tokenizer grammars cannot use
        is left to refuse each request that asks for one."""
        try:
            self.tokenizer
        except GrammarError:
            pass
        return self

    def compile(self, kind: str, source: Any = None) -> LLGrammar:
        """By kind: "json_schema" (source: the schema), "json_object", "gbnf" or "lark" (the
        grammar's text)."""
        if kind == "json_object":
            return self.json_object()
        build = {"json_schema": self.json_schema, "gbnf": self.gbnf, "lark": self.lark}.get(kind)
        if build is None:
            raise GrammarError(f"unknown grammar kind {kind!r}")
        return build(source)

    def json_schema(self, schema: Any) -> LLGrammar:
        """Output that is JSON valid against `schema` (a dict, or its JSON text)."""
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                raise GrammarError(f"the JSON schema is not JSON: {exc}") from None
        if not isinstance(schema, (dict, bool)):
            raise GrammarError("a JSON schema must be an object")
        try:
            text = json.dumps(closed_objects(schema))  # key order is output order: never sorted
        except RecursionError:
            raise GrammarError("the JSON schema is nested too deeply") from None
        return self._compiled("json_schema", text, lambda: llguidance.LLMatcher
                              .grammar_from_json_schema(text, defaults=JSON_OPTIONS))

    def json_object(self) -> LLGrammar:
        """Any JSON object (OpenAI's `json_object` response format)."""
        return self.json_schema({"type": "object"})

    def gbnf(self, text: str) -> LLGrammar:
        """llama.cpp's GBNF (or Lark) grammar text."""
        return self._compiled("gbnf", text, lambda: llguidance.grammar_from("gbnf", text))

    def lark(self, text: str) -> LLGrammar:
        """A Lark grammar (llguidance's dialect: `%json {...}` embeds a JSON schema)."""
        return self._compiled("lark", text, lambda: llguidance.LLMatcher.grammar_from_lark(text))

    def _compiled(self, kind: str, text: str, build) -> LLGrammar:
        key = (kind, text)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        try:
            grammar = build()
        except (ValueError, RuntimeError) as exc:
            raise GrammarError(f"the {kind.replace('_', ' ')} cannot be compiled: "
                               f"{_first_line(exc)}") from None
        error = llguidance.LLMatcher.validate_grammar(grammar, self.tokenizer, limits=_LIMITS)
        if error and not error.startswith("WARNING"):
            raise GrammarError(f"the {kind.replace('_', ' ')} cannot be compiled: "
                               f"{_first_line(error)}")
        compiled = LLGrammar(self.tokenizer, grammar, frozenset(self.eos_token_ids))
        compiled.matcher()  # the first mask's work is bounded too: fail here, not in a step
        with self._lock:
            self._cache[key] = compiled
            if len(self._cache) > CACHED_GRAMMARS:
                self._cache.popitem(last=False)
        return compiled


# the keywords whose values are schemas, and those whose values hold schemas (a list or a map)
_SUBSCHEMA = ("items", "additionalProperties", "not", "if", "then", "else", "contains",
              "propertyNames", "unevaluatedItems", "unevaluatedProperties")
_SUBSCHEMAS = ("properties", "patternProperties", "prefixItems", "anyOf", "oneOf", "allOf",
               "$defs", "definitions", "dependentSchemas")


def closed_objects(schema: Any) -> Any:
    """`schema` with every object that lists its `properties` and says nothing of other keys
    closed to them (`additionalProperties: false`), as llama.cpp's converter and xgrammar's
    strict mode (vLLM's default) read such schemas: clients' schemas mostly leave it out, and
    a model kept free to add keys may add them until the token limit (greedy decoding does,
    a key after another). A schema that allows other keys says so."""
    if isinstance(schema, list):
        return [closed_objects(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in _SUBSCHEMA:
            value = closed_objects(value)
        elif key in _SUBSCHEMAS and isinstance(value, (dict, list)):
            value = (closed_objects(value) if isinstance(value, list)
                     else {k: closed_objects(v) for k, v in value.items()})
        out[key] = value
    if "properties" in out and not {"additionalProperties", "patternProperties",
                                    "unevaluatedProperties"} & out.keys():
        out["additionalProperties"] = False
    return out


def _first_line(error: object) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else "unknown error"


_COMPILERS: dict[str, GrammarCompiler] = {}


def grammar_compiler(model: Any) -> GrammarCompiler:
    """The compiler for a `models.LoadedModel` (one per model, made on first use)."""
    if model.key not in _COMPILERS:
        _COMPILERS[model.key] = GrammarCompiler(model.tokenizer, model.target.vocab_size,
                                                model.eos_token_ids)
    return _COMPILERS[model.key]
