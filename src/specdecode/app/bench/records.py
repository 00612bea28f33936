"""One benchmark run per record, kept in `records.jsonl` as each run finishes, so an interrupted
bench loses at most the run in progress and `--resume` recomputes nothing already recorded."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ...errors import InvalidParameterError

RECORDS = "records.jsonl"
SETTINGS = "settings.json"


@dataclass
class Record:
    question_id: int
    turn: int  # 1, or 2 for MT-bench's second turn (conditioned on our plain first answer)
    group: str
    method: str  # a label: "ar", "lookup", "hf", or "lookup@d4" in a depth sweep
    repeat: int
    new_tokens: int
    seconds: float  # prefill + decoding
    target_forwards: int | None = None  # None for the transformers / llama.cpp peers
    confirmed_tokens: int | None = None  # new tokens + a final EOS: the numerator of τ
    drafted: int | None = None
    accepted: int | None = None
    drafted_at: list[int] = field(default_factory=list)  # [i]: drafts with a token at position i
    accepted_at: list[int] = field(default_factory=list)  # [i]: drafts whose token i was accepted
    token_ids: list[int] = field(default_factory=list)
    prefill_seconds: float | None = None  # of `seconds`; None for the transformers / llama.cpp peers
    forced: int | None = None  # draft tokens a question's grammar forced (`RunStats.forced`)
    grammar_seconds: float | None = None  # of `seconds`: the grammar's masks and matcher
    first_token_seconds: float | None = None  # of `seconds`: to the first tokens (ours only)

    @property
    def key(self) -> tuple[int, int, str, int]:
        return (self.question_id, self.turn, self.method, self.repeat)


class RecordStore:
    """`records.jsonl` plus `settings.json` (what must not change between a run and its resume:
    model, dtype, sampling, token budget, drafter options)."""

    def __init__(self, directory: Path, settings: dict, resume: bool) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / RECORDS
        self.records: dict[tuple, Record] = {}
        settings_path = directory / SETTINGS
        if resume and self.path.exists():
            earlier = json.loads(settings_path.read_text()) if settings_path.exists() else {}
            changed = sorted(k for k in settings if earlier.get(k) != settings[k])
            if changed:
                raise InvalidParameterError(
                    f"cannot resume {directory}: its runs used other settings for "
                    f"{', '.join(changed)}; rerun without --resume or choose another --out")
            names = {f.name for f in fields(Record)}
            text = self.path.read_text()
            if text and not text.endswith("\n"):  # end a line cut by a kill before appending
                with self.path.open("a") as f:
                    f.write("\n")
            for line in text.splitlines():
                if line.strip():
                    try:
                        record = Record(**{k: v for k, v in json.loads(line).items() if k in names})
                    except (ValueError, TypeError):
                        continue  # a line cut by a kill mid-write: that run is simply redone
                    self.records[record.key] = record
        else:
            self.path.write_text("")
        settings_path.write_text(json.dumps(settings, indent=1) + "\n")

    def get(self, key: tuple) -> Record | None:
        return self.records.get(key)

    def add(self, record: Record) -> None:
        self.records[record.key] = record
        with self.path.open("a") as f:
            f.write(json.dumps(asdict(record)) + "\n")
            f.flush()

    def all(self) -> list[Record]:
        return list(self.records.values())
