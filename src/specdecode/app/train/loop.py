"""The training loop: AdamW with linear warm-up and cosine decay, a checkpoint after every epoch.

An epoch's batch order and feature noise come from generators seeded by (seed, epoch), and the
checkpoint holds the head, optimizer and schedule, so a run resumed after epoch e continues as if it
had never stopped.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import nn

from .objectives import TrainSequence, collate

CHECKPOINT_FILE = "checkpoint.pt"


@dataclass(frozen=True)
class TrainSettings:
    epochs: int
    lr: float
    batch_size: int = 8  # sequences; ~2k tokens of SmolLM2 self-distillation data
    warmup: float = 0.05  # fraction of all steps spent warming up linearly
    grad_clip: float = 0.5  # max gradient norm, as EAGLE
    seed: int = 0


def lr_factor(step: int, total: int, warmup: int) -> float:
    """Multiplier of the base learning rate: (step + 1) / warmup while warming up, then a cosine
    from 1 down to 0 at the last step."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(total - warmup, 1)
    return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def batch_order(lengths: Sequence[int], batch_size: int, generator: torch.Generator) -> list[list[int]]:
    """Shuffled batches of similar-length sequences (less padding): shuffle, sort windows of 16
    batches by length, cut them into batches, shuffle the batches."""
    order = torch.randperm(len(lengths), generator=generator).tolist()
    window = batch_size * 16
    batches = []
    for start in range(0, len(order), window):
        part = sorted(order[start:start + window], key=lambda i: lengths[i])
        batches.extend(part[i:i + batch_size] for i in range(0, len(part), batch_size))
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


@torch.no_grad()
def evaluate(head: nn.Module, objective, sequences: Sequence[TrainSequence],
             batch_size: int) -> dict:
    """Held-out loss (mean over counted predictions) and top-1 accuracy per draft position
    (EAGLE: the first draft token; Medusa: heads 1..K), without feature noise."""
    head.eval()
    results = [objective(head, collate(sequences[i:i + batch_size]))
               for i in range(0, len(sequences), batch_size)]
    counted = sum(r.counted for r in results)
    loss = sum(r.loss.item() * r.counted[0].item() for r in results) / max(counted[0].item(), 1)
    accuracy = sum(r.correct for r in results) / counted.clamp(min=1)
    return {"val_loss": loss, "val_accuracy": [round(a, 4) for a in accuracy.tolist()]}


def train(head: nn.Module, objective, train_data: Sequence[TrainSequence],
          val_data: Sequence[TrainSequence], settings: TrainSettings, directory: Path,
          progress: bool = True,
          on_epoch_end: Callable[[int, dict], dict | None] | None = None) -> list[dict]:
    """Train `head` for the remaining epochs, checkpointing to directory/checkpoint.pt after each
    (resumed from there when it exists). `on_epoch_end(epoch, metrics)` may return extra metrics
    for the epoch's record. Returns one record per epoch, earlier runs' included."""
    from tqdm import tqdm

    lengths = [len(s.ids) for s in train_data]
    steps = math.ceil(len(train_data) / settings.batch_size)
    total = steps * settings.epochs
    warmup = max(1, round(settings.warmup * total))
    optimizer = torch.optim.AdamW(head.parameters(), lr=settings.lr, betas=(0.9, 0.95),
                                  weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, total, warmup))
    history: list[dict] = []
    directory.mkdir(parents=True, exist_ok=True)
    checkpoint = directory / CHECKPOINT_FILE
    if checkpoint.is_file():
        state = torch.load(checkpoint, weights_only=True)
        head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        history = state["history"]
    for epoch in range(len(history) + 1, settings.epochs + 1):
        started = time.perf_counter()
        generator = torch.Generator().manual_seed(settings.seed * 100_003 + epoch)
        head.train()
        running, seen = 0.0, 0
        bar = tqdm(batch_order(lengths, settings.batch_size, generator), unit="batch",
                   desc=f"epoch {epoch}/{settings.epochs}", disable=not progress)
        for indices in bar:
            result = objective(head, collate([train_data[i] for i in indices]), generator)
            optimizer.zero_grad()
            if result.loss.requires_grad:  # False only when no prediction in the batch counted
                result.loss.backward()
                nn.utils.clip_grad_norm_(head.parameters(), settings.grad_clip)
                optimizer.step()
            schedule.step()
            running, seen = running + result.loss.item(), seen + 1
            bar.set_postfix(loss=f"{running / seen:.4f}")
        record = {"epoch": epoch, "train_loss": running / max(seen, 1),
                  **evaluate(head, objective, val_data, settings.batch_size),
                  "seconds": round(time.perf_counter() - started, 1)}
        if on_epoch_end:
            record.update(on_epoch_end(epoch, record) or {})
        history.append(record)
        tmp = checkpoint.with_suffix(".tmp")  # written aside: an interruption leaves the last one
        torch.save({"head": head.state_dict(), "optimizer": optimizer.state_dict(),
                    "schedule": schedule.state_dict(), "history": history}, tmp)
        os.replace(tmp, checkpoint)
    head.eval()
    return history
