"""Drafters propose; the verifier decides. Importing this package registers every drafter."""

from . import draft_model, layerskip, lookup, plain  # noqa: F401  (registration side effect)
from .base import DRAFTERS, Draft, Drafter, DrafterOptions, DraftLength, create_drafter, register

__all__ = ["DRAFTERS", "Draft", "DraftLength", "Drafter", "DrafterOptions", "create_drafter",
           "register"]
