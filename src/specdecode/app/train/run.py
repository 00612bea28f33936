"""`specdecode train eagle|medusa`: the whole pipeline, resumable phase by phase.

    prompts -> greedy answers (answers.jsonl) -> draft vocabulary -> teacher-forced features
    (features/) -> epochs (checkpoint.pt) -> head/ (save_head) -> validation τ with the real drafter

Everything lives in the output directory. run.json records the settings that shape the data:
`--resume` continues only a run started with the same ones, and redoes no finished work.
training.json records those that shape the training alone (method, sizes, schedule): when they
change, training starts over from epoch 1 on the cached answers and features.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ...core.target import FeatureTarget
from ...errors import InvalidParameterError, SpecDecodeError
from ...models import DEFAULT_MODEL, load_model
from ...models.heads import HEADS, save_head
from .data import (
    ANSWERS_FILE,
    MAX_PROMPT_TOKENS,
    generate_answers,
    hf_greedy,
    read_prompts,
    select_prompts,
)
from .features import FEATURES_DIR, extract_features
from .loop import CHECKPOINT_FILE, TrainSettings, train
from .objectives import OBJECTIVES, TrainSequence
from .tau import measure_tau
from .vocab import coverage, select_draft_vocab

RUN_FILE, TRAINING_FILE, HEAD_DIR = "run.json", "training.json", "head"
# Sized so that `train eagle` for the default model fits a 90-minute budget on 2 CPU cores with
# room for a slower host; data is what a head lacks most (docs/benchmarks/learned).
DEFAULT_NUM_PROMPTS = 2400
DEFAULT_VAL_PROMPTS = 24
DEFAULT_EPOCHS = 12
# Medusa's own rate; a sweep on a small EAGLE run favoured slightly higher ones, but more data
# makes more steps (docs/benchmarks/defaults)
LEARNING_RATE = 1e-3
TAU_PROMPTS = 8  # validation prompts the real drafter runs on at the end


@dataclass(frozen=True)
class TrainOptions:
    method: str  # "eagle" or "medusa"
    out: Path
    prompts: Path
    model: str = DEFAULT_MODEL
    num_prompts: int = DEFAULT_NUM_PROMPTS
    val_prompts: int = DEFAULT_VAL_PROMPTS
    max_new_tokens: int = 128
    epochs: int = DEFAULT_EPOCHS
    draft_vocab: int = 8192
    medusa_heads: int = 3
    lr: float = LEARNING_RATE
    batch_size: int = 8
    seed: int = 0

    def check(self) -> None:
        """One-line errors for values no run could use."""
        if self.method not in OBJECTIVES:
            raise InvalidParameterError(f"unknown head kind {self.method!r} (choose eagle or medusa)")
        for name in ("num_prompts", "val_prompts", "max_new_tokens", "epochs", "medusa_heads",
                     "batch_size"):
            if getattr(self, name) < 1:
                raise InvalidParameterError(f"--{name.replace('_', '-')} must be >= 1, "
                                            f"got {getattr(self, name)}")
        if self.draft_vocab < 0:
            raise InvalidParameterError(f"--draft-vocab must be >= 0 (0 = the full vocabulary), "
                                        f"got {self.draft_vocab}")
        if not self.lr > 0:
            raise InvalidParameterError(f"--lr must be > 0, got {self.lr}")


def run_training(options: TrainOptions, resume: bool = False, command_line: str = "",
                 progress: bool = True, log: Callable[[str], None] | None = None) -> dict:
    """Run (or resume) every phase; write out/head; return the head's training record."""
    log = log or (lambda line: print(f"specdecode: {line}", file=sys.stderr))
    started, timings = time.perf_counter(), {}
    options.check()
    records = read_prompts(options.prompts)  # a bad file fails before the model loads
    out = Path(options.out)
    model = load_model(options.model, backend="native")
    target = model.target
    limit = min(MAX_PROMPT_TOKENS, target.max_length - options.max_new_tokens)
    if limit < 1:
        raise InvalidParameterError(f"--max-new-tokens {options.max_new_tokens} leaves no room for "
                                    f"a prompt in the model's {target.max_length}-token context")
    chosen = select_prompts(records, model.encode_prompt, options.num_prompts,
                            options.val_prompts, limit, options.seed)
    _claim(out, _data_settings(options, model.key), resume)  # the first write: all checks passed

    clock = time.perf_counter()
    samples = generate_answers(chosen, hf_greedy(model, options.max_new_tokens),
                               out / ANSWERS_FILE, progress=progress)
    timings["answers"] = time.perf_counter() - clock
    train_samples = [s for s in samples if s.split == "train"]
    val_samples = [s for s in samples if s.split == "val"]
    vocab = select_draft_vocab([s.answer_ids for s in train_samples],
                               [s.prompt_ids for s in train_samples], options.draft_vocab,
                               target.vocab_size)
    covered = {split: round(coverage(vocab, [s.answer_ids for s in group]), 4)
               for split, group in (("train", train_samples), ("val", val_samples))}
    log(f"draft vocabulary: {len(vocab) if vocab else target.vocab_size} ids cover "
        f"{covered['train']:.1%} of the training answers' tokens, {covered['val']:.1%} of the "
        "validation answers'")

    clock = time.perf_counter()
    features = extract_features(target, samples, out / FEATURES_DIR, progress=progress)
    timings["features"] = time.perf_counter() - clock
    sequences = {s.id: TrainSequence(torch.tensor(s.tokens), features[s.id], len(s.prompt_ids))
                 for s in samples}

    clock = time.perf_counter()
    _start_or_continue_training(out, _training_settings(options), log)
    torch.manual_seed(options.seed)  # the head's initial weights
    head = _new_head(options, target, vocab)
    objective = OBJECTIVES[options.method](target, vocab)
    history = train(head, objective, [sequences[s.id] for s in train_samples],
                    [sequences[s.id] for s in val_samples],
                    TrainSettings(options.epochs, options.lr, options.batch_size,
                                  seed=options.seed), out, progress)
    timings["training"] = time.perf_counter() - clock

    record = {
        "target": _model_reference(options.model),
        "target_key": model.key,
        "training": {
            "train_prompts": len(train_samples), "val_prompts": len(val_samples),
            "train_tokens": sum(len(s.tokens) for s in train_samples),
            "train_answer_tokens": sum(len(s.answer_ids) for s in train_samples),
            "max_new_tokens": options.max_new_tokens, "epochs": options.epochs,
            "lr": options.lr, "batch_size": options.batch_size, "seed": options.seed,
            "draft_vocab_coverage": covered, "history": history, "command": command_line,
        },
    }
    head_dir = save_head(head, out / HEAD_DIR, record)
    clock = time.perf_counter()
    try:
        tau = measure_tau(model, options.method, head_dir,
                          [s.prompt_ids for s in val_samples[:TAU_PROMPTS]],
                          options.max_new_tokens, progress)
    except SpecDecodeError as exc:  # the head is saved either way; say why τ is missing
        log(f"validation τ skipped: {exc}")
        tau = None
    timings["tau"] = time.perf_counter() - clock
    record["training"].update(
        validation_tau=tau, resumed=resume,
        phase_seconds={k: round(v, 1) for k, v in timings.items()},
        wall_seconds=round(time.perf_counter() - started, 1))
    save_head(head, head_dir, record)
    return record


def _data_settings(options: TrainOptions, model_key: str) -> dict:
    """What shapes the answers and features: a resumed run must have been started with the same."""
    return {"model": model_key, "prompts": str(Path(options.prompts).resolve()),
            "num_prompts": options.num_prompts, "val_prompts": options.val_prompts,
            "max_new_tokens": options.max_new_tokens, "seed": options.seed}


def _training_settings(options: TrainOptions) -> dict:
    return {"method": options.method, "draft_vocab": options.draft_vocab,
            "medusa_heads": options.medusa_heads if options.method == "medusa" else None,
            "epochs": options.epochs, "lr": options.lr,
            "batch_size": options.batch_size}


def _claim(out: Path, settings: dict, resume: bool) -> None:
    """Start a run in `out`, or check that the one there may be resumed with these settings."""
    run_file = out / RUN_FILE
    if run_file.is_file():
        if not resume:
            raise InvalidParameterError(f"{out} already holds a training run: pass --resume to "
                                        "continue it, or choose another --out")
        changed = _changes(json.loads(run_file.read_text()), settings)
        if changed:
            raise InvalidParameterError(f"--resume: {out} was started with other settings "
                                        f"({changed}); use them or another --out")
        return
    if out.exists() and any(out.iterdir()):
        raise InvalidParameterError(f"{out} is not empty and holds no training run; "
                                    "choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps(settings, indent=1) + "\n")


def _start_or_continue_training(out: Path, settings: dict, log: Callable[[str], None]) -> None:
    """Keep the checkpoint only if it was made with these training settings."""
    path, checkpoint = out / TRAINING_FILE, out / CHECKPOINT_FILE
    before = json.loads(path.read_text()) if path.is_file() else {}
    if before == settings:
        return
    if checkpoint.is_file():
        log(f"training settings changed ({_changes(before, settings)}): training starts over "
            "from epoch 1 on the cached answers and features")
        checkpoint.unlink()
    path.write_text(json.dumps(settings, indent=1) + "\n")


def _changes(before: dict, now: dict) -> str:
    return "; ".join(f"{k} {before.get(k)!r} -> {v!r}" for k, v in now.items()
                     if before.get(k) != v)


def _new_head(options: TrainOptions, target: FeatureTarget,
              vocab: list[int] | None) -> torch.nn.Module:
    if options.method == "eagle":
        cfg = target.layer_shape()
    else:
        cfg = {"hidden_size": target.hidden_size, "num_heads": options.medusa_heads}
    if vocab is not None:
        cfg["draft_vocab"] = vocab
    return HEADS[options.method](cfg)


def _model_reference(name: str) -> str:
    """The model as a later process can name it (`export` resolves it): an alias or hub id as
    given, a local path made absolute."""
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name
