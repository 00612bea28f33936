"""What `specdecode serve` runs, from its command line: the app around the loaded model (the Ray
replicas of `serve --ray` build theirs here too, so each serves exactly what one server does)."""

from __future__ import annotations

import argparse
import os

from fastapi import FastAPI

from ...pipeline import SpecDecoder
from ..options import drafter_values, load, parse_size, resolve_args
from .app import create_app
from .guard import DEFAULT_MAX_BODY_BYTES

API_KEY_VARIABLE = "SPECDECODE_API_KEY"


def build_app(args: argparse.Namespace) -> tuple[FastAPI, str]:
    """The app for `serve`'s arguments (its model loaded on the calling thread) and a line that
    says what it serves."""
    max_body_bytes = DEFAULT_MAX_BODY_BYTES if args.max_body_bytes is None else args.max_body_bytes
    api_key = args.api_key or os.environ.get(API_KEY_VARIABLE) or None
    model = load(args)
    decoder = SpecDecoder(model, resolve_args(args, model))
    app = create_app(decoder, options=drafter_values(args), max_queue=args.max_queue,
                     max_batch=args.max_batch, speculation=args.speculation,
                     request_timeout=args.request_timeout,
                     model_id=args.served_model_name, api_key=api_key,
                     max_body_bytes=max_body_bytes,
                     # a share of memory is of what is available once the model is loaded
                     prefix_cache_bytes=parse_size(args.prompt_cache, "--prompt-cache"),
                     prompt_cache_dir=args.prompt_cache_dir,
                     prompt_cache_disk_bytes=parse_size(args.prompt_cache_disk,
                                                        "--prompt-cache-disk"),
                     cors_origins=tuple(o.strip() for o in args.cors_origins.split(",")
                                        if o.strip() not in ("", "none")), slots=args.slots)
    note = f"; {decoder.spec.note}" if decoder.spec.note else ""
    access = "API key required" if api_key else "no API key: open to anyone who can connect"
    return app, (f"{model.name} ({decoder.describe()}{note}; {model.kernels}; up to "
                 f"{args.max_batch} requests at once, speculation {args.speculation}; "
                 f"{_prompt_cache(app, args)}; {access})")


def _prompt_cache(app: FastAPI, args: argparse.Namespace) -> str:
    """What the start-up line says of the kept prompts."""
    prefixes = app.state.specdecode.worker.prefixes
    if prefixes is None:
        return "no prompt cache"
    where = ("" if prefixes.store is None else
             f", and up to {prefixes.store.max_bytes / 2**30:.1f} GiB in {args.prompt_cache_dir}"
             f" ({len(prefixes.store.index)} prompts there)")
    return f"prompt cache {prefixes.max_bytes / 2**30:.1f} GiB in memory{where}"
