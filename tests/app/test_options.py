"""From the command line to the library (`app.options`): sizes given as bytes, units or a share of
the available memory."""

from __future__ import annotations

import pytest

from specdecode.app import options
from specdecode.errors import InvalidParameterError


def test_a_size_reads_bytes_units_and_a_share_of_available_memory(monkeypatch):
    monkeypatch.setattr(options, "available_memory", lambda: 8 << 30)
    assert options.parse_size("1000", "--x") == 1000
    assert options.parse_size("512M", "--x") == 512 << 20
    assert options.parse_size("1.5G", "--x") == 3 << 29
    assert options.parse_size("4GiB", "--x") == options.parse_size("4gb", "--x") == 4 << 30
    assert options.parse_size("25%", "--x") == 2 << 30
    assert options.parse_size("0", "--x") == 0


@pytest.mark.parametrize("text", ["lots", "-1G", "150%", "4X", ""])
def test_a_size_that_is_none_is_a_one_line_error_naming_the_flag(text):
    with pytest.raises(InvalidParameterError, match="--prompt-cache"):
        options.parse_size(text, "--prompt-cache")


def test_available_memory_is_some_positive_number_of_bytes():
    assert options.available_memory() > 0
