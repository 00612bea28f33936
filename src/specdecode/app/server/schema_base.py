"""What every dialect's request bodies are made of, validated by pydantic.

Validation is strict (a string is not a number, a number is not a bool), because every value the
client sends reaches the engine and a silently coerced value is a wrong answer, not a convenience.
Every field a request may carry is declared in its dialect's schema module, and those are the
fields the server honours: anything else is refused by name (`extra="forbid"`), never silently
dropped, and fields a dialect defines that the engine cannot honour yet are accepted only at
their "off" value.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ...core.budget import MAX_DRAFT_NODES
from ...core.penalties import BIAS_RANGE

MAX_STOP_STRINGS = 4  # OpenAI's limit
# torch.Generator.manual_seed accepts exactly this range
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1


def _number(value: Any) -> float:
    """Any JSON number (an integer too), nothing else: not a bool, not a numeric string."""
    if type(value) not in (int, float):  # bool and numeric strings are not numbers
        raise ValueError("Input should be a number")
    try:
        return float(value)
    except OverflowError:  # an integer literal beyond float range
        raise ValueError("Input is too large") from None


Number = Annotated[float, BeforeValidator(_number)]


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")


def text_content(content: Any) -> str:
    """OpenAI's text content in either shape: a string, or a list of text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise ValueError("content must be a string or a list of text parts "
                     '({"type": "text", "text": ...}); other parts are not supported')


class SpeculativeOptions(Strict):
    """Extension: which drafter serves this request and its draft caps (default: the server's
    --method, --max-draft-nodes and --max-draft-depth)."""

    method: str | None = None
    max_draft_nodes: int | None = Field(None, ge=1, le=MAX_DRAFT_NODES)
    max_draft_depth: int | None = Field(None, ge=1, le=MAX_DRAFT_NODES)



def stop_list(stop: Any) -> list[str]:
    """Stop strings given as a string or a list of strings, at most MAX_STOP_STRINGS, none
    empty."""
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise ValueError("stop must be a string or a list of strings")
    if len(stops) > MAX_STOP_STRINGS:
        raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings are allowed")
    if any(not s for s in stops):
        raise ValueError("stop strings must not be empty")
    return stops


def check_bias(bias: dict[int, float]) -> None:
    """Biases by token id, each in BIAS_RANGE."""
    low, high = BIAS_RANGE
    for value in bias.values():
        if not low <= value <= high:
            raise ValueError(f"logit_bias values must be in [{low:g}, {high:g}], got {value}")
