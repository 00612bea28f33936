"""Drafters propose; the verifier decides. Importing this package registers every drafter."""

from . import draft_model, eagle, layerskip, lookup, medusa, plain  # noqa: F401  (registers them)
from .base import (
                   DRAFTERS,
                   Draft,
                   Drafter,
                   NoOptions,
                   create_drafter,
                   drafter_class,
                   make_options,
                   option,
                   option_fields,
                   register,
)

__all__ = ["DRAFTERS", "Draft", "Drafter", "NoOptions", "create_drafter", "drafter_class",
           "make_options", "option", "option_fields", "register"]
