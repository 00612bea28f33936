"""From the command line to the library: the drafting flags (made from the drafter registry, so a
new drafter's options appear without touching the CLI), the model it names, and the resolved spec.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ..drafters import option_fields
from ..errors import InvalidParameterError
from ..models import LoadedModel, load_model
from ..spec import DecodingSpec, check_options, resolve


def add_drafter_arguments(p: argparse.ArgumentParser) -> None:
    """The draft caps, --adaptive, and one flag per drafter option (`--ngram-max`, ...): an option
    several drafters share is one flag whose help names each."""
    p.add_argument("--max-draft-nodes", type=int,
                   help="the most draft tokens one step may score (a tree's nodes; a chain's "
                        "length is the smaller cap); each step scores those whose estimated "
                        "chance of acceptance pays for their rows on this machine (default: the "
                        "tuned profile's, else the method's own)")
    p.add_argument("--max-draft-depth", type=int,
                   help="the longest draft path: a chain's length, a tree's levels, medusa's "
                        "heads used (default: the tuned profile's, else the method's own)")
    p.add_argument("--adaptive", action="store_true",
                   help="adapt the depth cap per step: +2 after a draft accepted to its deepest "
                        "level, -1 after a rejection, within 1..--max-draft-depth")
    for name, declared in option_fields().items():
        first = declared[0][1]
        helps = [f"{method}: {f.metadata['help']}" for method, f in declared]
        default = "" if first.default is None else f" (default {first.default})"
        flag = "--" + name.replace("_", "-")
        if isinstance(first.default, bool):
            p.add_argument(flag, dest=name, action="store_true", default=None,
                           help="; ".join(helps))
            continue
        # text the drafter parses itself (with a one-line error), else the default's type
        kind = str if first.metadata.get("parse") or first.default is None else type(first.default)
        p.add_argument(flag, dest=name, type=kind, default=None, help="; ".join(helps) + default)


def drafter_values(args: argparse.Namespace) -> dict[str, Any]:
    """The drafter options given on the command line, by field name (None: not given)."""
    return {name: getattr(args, name, None) for name in option_fields()}


def check_args(args: argparse.Namespace) -> None:
    """Bad drafting values fail before the model loads (and before anything is printed)."""
    check_options(getattr(args, "method", None), args.max_draft_nodes, args.max_draft_depth,
                  drafter_values(args))


def load(args: argparse.Namespace) -> LoadedModel:
    """The model the command line names."""
    return load_model(args.model, backend=args.backend, dtype=args.dtype, device=args.device)


def resolve_args(args: argparse.Namespace, model: LoadedModel, method: str | None = None,
                 **overrides: Any) -> DecodingSpec:
    """The spec for `method` (default --method) with the command line's drafting values, some
    replaced by `overrides` (by field name)."""
    return resolve(model, method or getattr(args, "method", None),
                   max_draft_nodes=args.max_draft_nodes, max_draft_depth=args.max_draft_depth,
                   adaptive=args.adaptive, options={**drafter_values(args), **overrides})


def positive_ints(text: str, flag: str) -> list[int]:
    """'1,4,2' -> [1, 2, 4]; a one-line error naming `flag` for anything else."""
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise InvalidParameterError(f"{flag} takes comma-separated integers, got {text!r}")
    if not values or values[0] < 1:
        raise InvalidParameterError(f"{flag} values must be >= 1, got {text!r}")
    return values


SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def available_memory() -> int:
    """Bytes of memory available to a new allocation (Linux's MemAvailable; else free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def parse_size(text: str, flag: str) -> int:
    """'512M', '4G', '1.5G', '1000' (bytes) or '25%' (of the memory available now) -> bytes; a
    one-line error naming `flag` for anything else."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        if value.endswith("%"):
            share = float(value[:-1])
            if not 0 <= share <= 100:
                raise ValueError
            return int(available_memory() * share / 100)
        unit = value[-1:] if value[-1:] in SIZE_UNITS and value[-1:] else ""
        number = float(value[: len(value) - len(unit)])
        if number < 0:
            raise ValueError
        return int(number * SIZE_UNITS[unit])
    except ValueError:
        raise InvalidParameterError(f"{flag} takes a size such as 512M, 4G or 25% (of the "
                                    f"available memory), got {text!r}") from None


def print_json(obj) -> None:
    print(json.dumps(obj, ensure_ascii=False))
