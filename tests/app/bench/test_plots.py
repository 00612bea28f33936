"""The benchmark's plots: written for any summary, without matplotlib's warnings."""

import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from specdecode.app.bench.plots import legend, write_plots  # noqa: E402


def test_legend_is_drawn_only_where_a_curve_has_a_label():
    fig, (bare, named) = plt.subplots(1, 2)
    bare.plot([1, 2], [3, 4])
    named.plot([1, 2], [3, 4], label="draft")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        legend(bare)
        legend(named)
    assert bare.get_legend() is None
    assert [t.get_text() for t in named.get_legend().get_texts()] == ["draft"]
    plt.close(fig)


def test_plots_of_plain_decoding_alone_are_written_without_warnings(tmp_path):
    summary = {"overall": {"ar": {"tokens_per_s": 20.0}}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths = write_plots(summary, {}, tmp_path, "ar only")
    assert [p.name for p in paths] == ["speedup_by_group.png", "acceptance_by_position.png",
                                       "speedup_tau_vs_depth.png"]
    assert all(p.stat().st_size > 0 for p in paths)
