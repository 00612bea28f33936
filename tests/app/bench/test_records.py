"""records.jsonl: appended per run, reloaded by --resume, refused when the settings changed."""

import pytest

from specdecode.app.bench.records import Record, RecordStore
from specdecode.errors import InvalidParameterError

SETTINGS = {"model": "m", "temperature": 0.0}


def record(qid, method="ar", repeat=0, turn=1):
    return Record(qid, turn, "translation", method, repeat, 3, 0.5, 3, 3, 0, 0, [], [], [1, 2, 3])


def test_resume_reloads_every_recorded_run(tmp_path):
    store = RecordStore(tmp_path, SETTINGS, resume=False)
    store.add(record(1))
    store.add(record(1, "lookup"))
    again = RecordStore(tmp_path, SETTINGS, resume=True)
    assert again.get((1, 1, "lookup", 0)) == record(1, "lookup")
    assert len(again.all()) == 2


def test_without_resume_the_directory_starts_afresh(tmp_path):
    RecordStore(tmp_path, SETTINGS, resume=False).add(record(1))
    assert RecordStore(tmp_path, SETTINGS, resume=False).all() == []


def test_resume_with_other_settings_is_refused(tmp_path):
    RecordStore(tmp_path, SETTINGS, resume=False).add(record(1))
    with pytest.raises(InvalidParameterError, match="temperature"):
        RecordStore(tmp_path, {**SETTINGS, "temperature": 0.7}, resume=True)


def test_a_line_cut_by_a_kill_is_dropped_and_later_runs_still_load(tmp_path):
    store = RecordStore(tmp_path, SETTINGS, resume=False)
    store.add(record(1))
    with store.path.open("a") as f:
        f.write('{"question_id": 2, "tu')  # killed mid-write
    again = RecordStore(tmp_path, SETTINGS, resume=True)
    assert [r.question_id for r in again.all()] == [1]
    again.add(record(3))
    assert sorted(r.question_id for r in RecordStore(tmp_path, SETTINGS, True).all()) == [1, 3]
