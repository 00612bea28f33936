"""Drafters propose; the verifier decides. Importing this package registers every drafter."""

from . import draft_model, eagle, layerskip, lookup, medusa, plain  # noqa: F401  (registers them)
from .base import DRAFTERS, Draft, Drafter, DrafterOptions, DraftLength, create_drafter, register

__all__ = ["DRAFTERS", "Draft", "DraftLength", "Drafter", "DrafterOptions", "create_drafter",
           "register"]
