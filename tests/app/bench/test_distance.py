"""`bench --distance`: agreement with the fp32 reference, counted as documented."""

import re

from specdecode.app.bench.distance import Agreement
from specdecode.app.bench.synthetic import write_random_gguf
from specdecode.app.cli import main


def test_agreement_counts_forced_matches_identical_outputs_and_the_share_before_a_difference():
    a = Agreement()
    a.add(reference=[1, 2, 3, 4], predicted=[1, 9, 3, 4], greedy=[1, 2, 7, 7])
    a.add(reference=[5, 6], predicted=[5, 6], greedy=[5, 6])
    assert (a.forced_same, a.forced, a.identical) == (5, 6, 1)
    assert a.prefix_shares == [0.5, 1.0]
    assert a.row("x") == "| x | 83.33% | 1/2 | 75% |"


def test_distance_reports_our_path_against_the_dequantized_reference(tmp_path, capsys,
                                                                     default_model):
    path = write_random_gguf(tmp_path / "tiny.gguf", layers=2, hidden=64, heads=4, kv_heads=2,
                             intermediate=128, context=2048)
    assert main(["bench", "--distance", "--model", str(path), "--limit", "1",
                 "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert "6 Spec-Bench prompts (first turns), 8 new tokens" in out
    ours = re.search(r"\| specdecode Q4_1\+Q8_0, .* \| ([\d.]+)% \| (\d)/6 \| \d+% \|", out)
    assert ours and 0 <= float(ours[1]) <= 100
