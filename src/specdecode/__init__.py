"""specdecode: lossless speculative decoding for LLMs on ordinary hardware."""

from .drafters import DRAFTERS, Draft, Drafter, DrafterOptions, register
from .engine import GenerationConfig, GenerationResult
from .errors import SpecDecodeError
from .metrics import RunStats
from .models import DEFAULT_MODEL, load_model
from .pipeline import DEFAULT_METHOD, SpecDecoder
from .sampling import SamplingParams

__version__ = "0.1.0"
__all__ = [
    "DEFAULT_METHOD", "DEFAULT_MODEL", "DRAFTERS", "Draft", "Drafter", "DrafterOptions",
    "GenerationConfig", "GenerationResult", "RunStats", "SamplingParams", "SpecDecodeError",
    "SpecDecoder", "load_model", "register",
]
