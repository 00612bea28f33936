"""Where specdecode keeps what it builds and measures: converted weights, compiled kernels and
per-model profiles."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`SPECDECODE_CACHE`, else ~/.cache/specdecode."""
    return Path(os.environ.get("SPECDECODE_CACHE", Path.home() / ".cache" / "specdecode"))
