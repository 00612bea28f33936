"""llama.cpp's rules for where an answer ends (`llamacpp_answers.MiddleEnd`): /infill's middles
and /completion's answers."""

from __future__ import annotations

from specdecode.app.server.llamacpp_answers import MiddleEnd


def feed(end: MiddleEnd, parts: list[str]) -> list[str]:
    return [end.push(p, final=i == len(parts) - 1) for i, p in enumerate(parts)]


def test_without_rules_every_delta_is_sent_as_it_comes():
    end = MiddleEnd()
    assert feed(end, ["a\n", "b\n", "c"]) == ["a\n", "b\n", "c"] and not end.ended


def test_n_indent_ends_the_middle_at_the_first_later_line_indented_less():
    end = MiddleEnd(n_indent=4)
    sent = feed(end, ["x = 1\n", "    y = 2\n", "  ", "", "z", " = 3\n"])
    assert "".join(sent) == "x = 1\n    y = 2\n" and end.ended
    assert sent[2:4] == ["", ""]  # blanks wait until their line shows its indent


def test_n_indent_never_judges_the_cursors_own_line_nor_blank_lines():
    end = MiddleEnd(n_indent=8)
    assert "".join(feed(end, ["a", "\n", "\n", "        b\n", "c"])) == "a\n\n        b\n"
    assert end.ended


def test_a_time_limit_ends_the_middle_at_the_next_new_line():
    now = [0.0]
    end = MiddleEnd(t_max_ms=100, clock=lambda: now[0])
    assert end.push("abc") == "abc"
    now[0] = 0.5
    assert end.push("de\nfg\nh") == "de\n" and end.ended
    assert end.push("more") == ""
