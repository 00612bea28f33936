"""specdecode: lossless speculative decoding for LLMs on ordinary hardware."""

from .core.engine import GenerationResult
from .core.run_stats import RunStats
from .core.sampling import SamplingParams
from .core.sequence import GenerationConfig
from .drafters import DRAFTERS, Draft, Drafter, option, register
from .errors import SpecDecodeError
from .models import DEFAULT_MODEL, load_model
from .pipeline import SpecDecoder
from .spec import DEFAULT_METHOD, DecodingSpec, resolve

__version__ = "0.1.0"
__all__ = [
    "DEFAULT_METHOD", "DEFAULT_MODEL", "DRAFTERS", "DecodingSpec", "Draft", "Drafter",
    "GenerationConfig", "GenerationResult", "RunStats", "SamplingParams", "SpecDecodeError",
    "SpecDecoder", "load_model", "option", "register", "resolve",
]
