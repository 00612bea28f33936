"""Errors a user can cause. Each carries a one-line message; the CLI maps them to exit code 2.

Anything that is not a `SpecDecodeError` is a bug and is allowed to raise with a traceback.
"""


class SpecDecodeError(Exception):
    """Base class for user-facing errors (bad input, missing files, unreachable models)."""


class ModelLoadError(SpecDecodeError):
    """The model name, path or hub id cannot be resolved or loaded."""


class InvalidParameterError(SpecDecodeError):
    """A generation or drafter parameter is out of range."""


class VocabularyMismatchError(SpecDecodeError):
    """Drafter and target do not share a tokenizer, so draft tokens mean nothing to the target."""


class PromptTooLongError(SpecDecodeError):
    """The prompt does not fit into the model's context window."""


class KernelError(SpecDecodeError):
    """A C kernel refused its arguments or could not allocate its memory: the step stops there
    (its outputs are not used) and the request that ran it fails; others go on."""


class GrammarError(SpecDecodeError):
    """A schema or grammar that cannot constrain generation: invalid, or beyond the grammar
    engine's limits."""
