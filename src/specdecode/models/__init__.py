"""Targets (the models whose output is the truth) and the loader that builds them."""

from ..core.target import Target
from .hf_target import HFTarget
from .loader import DEFAULT_MODEL, LoadedModel, cache_dir, load_model

__all__ = ["DEFAULT_MODEL", "HFTarget", "LoadedModel", "Target", "cache_dir", "load_model"]
