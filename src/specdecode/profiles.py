"""Per-model profiles: measured choices saved per model key (e.g. which layers `layerskip` skips).

Profiles measured by this project for its embedded models ship inside the package
(`specdecode/data/profiles/`); profiles a user measures go to `cache_dir()/profiles/` and win.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from .storage import cache_dir


def _user_path(key: str) -> Path:
    return cache_dir() / "profiles" / f"{key}.json"


def load_profile(key: str) -> dict:
    """Shipped profile for this model key, overlaid section by section with the user's own."""
    profile: dict = {}
    shipped = resources.files("specdecode") / "data" / "profiles" / f"{key}.json"
    if shipped.is_file():
        profile.update(json.loads(shipped.read_text()))
    user = _user_path(key)
    if user.is_file():
        profile.update(json.loads(user.read_text()))
    return profile


def save_profile_section(key: str, section: str, data: dict) -> Path:
    """Write one section of the user's profile for this model key; returns the file written."""
    path = _user_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    profile = json.loads(path.read_text()) if path.is_file() else {}
    profile[section] = data
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(profile, indent=2) + "\n")
    tmp.replace(path)
    return path
