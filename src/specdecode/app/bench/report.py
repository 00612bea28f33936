"""The benchmark's numbers from its records: per task group and overall, per method, and the
Markdown report (Spec-Bench's leaderboard layout plus one detailed table per group)."""

from __future__ import annotations

import statistics

from .records import Record
from .specbench import GROUPS, SHORT


def summarize(records: list[Record]) -> dict:
    """Per group and overall, per method: tokens/s (total tokens / total median seconds, as
    Spec-Bench computes it), τ, acceptance rate and by draft position, speed-ups vs our `ar` and
    vs transformers plain (`hf`), and greedy mismatches against `ar` (prompts whose tokens differ).
    For our methods also the decoding rate, the prompt's prefill left out: sampled answers end at
    different lengths per method, and a short one spreads its whole prefill over few tokens.
    Only prompts (question, turn) that every method finished are compared."""
    runs: dict[tuple[int, int, str], list[Record]] = {}
    for r in records:
        runs.setdefault((r.question_id, r.turn, r.method), []).append(r)
    methods = {m for (_, _, m) in runs}
    prompts = {(q, t) for (q, t, _) in runs}
    complete = {p for p in prompts if all((*p, m) in runs for m in methods)}
    rows: dict[str, dict[str, dict]] = {}
    for (qid, turn, method), reps in sorted(runs.items(), key=lambda kv: kv[0]):
        if (qid, turn) not in complete:
            continue  # an interrupted prompt is not compared
        first = min(reps, key=lambda r: r.repeat)
        # greedy repeats give one answer: its tokens over the median time; sampled ones may
        # differ in length, and then every draw counts (tokens and time from the same runs)
        average = statistics.median if len({r.new_tokens for r in reps}) == 1 else statistics.mean
        tokens, seconds = average(r.new_tokens for r in reps), average(r.seconds for r in reps)
        decoding = (average(r.seconds - r.prefill_seconds for r in reps)
                    if all(r.prefill_seconds is not None for r in reps) else None)
        reference = min(runs[(qid, turn, "ar")], key=lambda r: r.repeat) if "ar" in methods else None
        for group in (first.group, "overall"):
            acc = rows.setdefault(group, {}).setdefault(method, dict(
                tokens=0, seconds=0.0, decoding_seconds=0.0, forwards=0, confirmed=0, drafted=0,
                accepted=0, prompts=0, mismatches=0, drafted_at=[], accepted_at=[],
                structured_tokens=0, structured_seconds=0.0, forced=0, grammar_seconds=0.0,
                first_token_seconds=0.0, timed_first=0))
            acc["tokens"] += tokens
            acc["seconds"] += seconds
            if decoding is None or acc["decoding_seconds"] is None:
                acc["decoding_seconds"] = None  # a run without a prefill time: no decoding rate
            else:
                acc["decoding_seconds"] += decoding
            acc["prompts"] += 1
            acc["forwards"] += first.target_forwards or 0
            acc["confirmed"] += first.confirmed_tokens or 0
            acc["drafted"] += first.drafted or 0
            acc["accepted"] += first.accepted or 0
            if all(r.first_token_seconds is not None for r in reps):
                acc["first_token_seconds"] += average(r.first_token_seconds for r in reps)
                acc["timed_first"] += 1
            if first.grammar_seconds is not None:  # a question with a json_schema
                acc["structured_tokens"] += first.new_tokens
                acc["structured_seconds"] += seconds
                acc["forced"] += first.forced or 0
                acc["grammar_seconds"] += first.grammar_seconds
            _add_counts(acc["drafted_at"], first.drafted_at)
            _add_counts(acc["accepted_at"], first.accepted_at)
            if reference is not None:
                acc["mismatches"] += int(first.token_ids != reference.token_ids)
    for group, by_method in rows.items():
        for acc in by_method.values():
            acc["tokens_per_second"] = acc["tokens"] / acc["seconds"] if acc["seconds"] else 0.0
            acc["decoding_tokens_per_second"] = (acc["tokens"] / acc["decoding_seconds"]
                                                 if acc["decoding_seconds"] else None)
            acc["tau"] = acc["confirmed"] / acc["forwards"] if acc["forwards"] else None
            acc["acceptance_rate"] = acc["accepted"] / acc["drafted"] if acc["drafted"] else None
            acc["acceptance_by_position"] = [a / d for a, d in
                                             zip(acc["accepted_at"], acc["drafted_at"]) if d]
            n = acc["structured_tokens"]  # of structured questions: forced share, grammar time
            acc["forced_share"] = acc["forced"] / n if n else None
            acc["grammar_ms_per_token"] = 1e3 * acc["grammar_seconds"] / n if n else None
        for acc in by_method.values():
            for base in ("ar", "hf"):
                if base in by_method and by_method[base]["tokens_per_second"]:
                    acc[f"speedup_vs_{base}"] = (acc["tokens_per_second"]
                                                 / by_method[base]["tokens_per_second"])
            plain = by_method.get("ar", {}).get("decoding_tokens_per_second")
            if plain and acc["decoding_tokens_per_second"]:
                acc["decoding_speedup_vs_ar"] = acc["decoding_tokens_per_second"] / plain
    return rows


def _add_counts(total: list[int], counts: list[int]) -> None:
    total.extend([0] * (len(counts) - len(total)))
    for i, c in enumerate(counts):
        total[i] += c


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def leaderboard(summary: dict, base: str) -> list[str]:
    """Spec-Bench's leaderboard layout: one row per method, the speed-up over `base` per task
    group and overall, and τ (mean tokens confirmed per target forward)."""
    groups = [g for g in GROUPS if g in summary]
    header = ["method", *[SHORT[g] for g in groups], "overall", "τ", "tok/s"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for name, acc in summary.get("overall", {}).items():
        cells = [_fmt(summary[g].get(name, {}).get(f"speedup_vs_{base}"), ".2f") + "×"
                 for g in groups]
        cells += [_fmt(acc.get(f"speedup_vs_{base}"), ".2f") + "×", _fmt(acc["tau"], ".2f"),
                  f"{acc['tokens_per_second']:.1f}"]
        lines.append(f"| {name} | " + " | ".join(c.replace("-×", "-") for c in cells) + " |")
    return lines


def format_report(summary: dict, info: dict, audit: list[dict] | None) -> str:
    m = info["machine"]
    mode = "greedy" if not info["temperature"] else f"sampling at temperature {info['temperature']}"
    prompts = (f"{info['fim']['prompts']} fill-in-the-middle prompts" if info.get("fim") else
               f"first {info['limit']} prompts per group (MT-bench: both turns)")
    lines = [f"# specdecode bench — {info['model']} ({info['backend']}, {info['dtype']}), {mode}, "
             f"{info['max_new_tokens']} new tokens, {prompts}, median of {info['repeats']}",
             f"machine: {m['cpu']}, {m['kernels']}, torch {m['torch']}, peak memory "
             f"{m['peak_rss_mb']:.0f} MB; commit {m['commit']}; {m['date']}", ""]
    if "step_cost" in info:
        c = info["step_cost"]
        lines[-1:-1] = [
            f"step cost the drafts were chosen by: {' / '.join(map(str, c['rows']))} rows "
            f"{' / '.join(f'{s * 1e3:.2f}' for s in c['seconds'])} ms after {c['context']} cached "
            f"tokens"
            + (f", {' / '.join(f'{s * 1e3:.2f}' for s in c['long_seconds'])} ms after "
               f"{c['long_context']}" if c.get("long_seconds") else "")
            + f"; + {c['per_cached'] * 1e9:.0f} ns a further row per cached token"]
    lines += [f"- `{name}`: {label}" for name, label in info["methods"].items()]
    for base, title in (("ar", "our plain decoding (`ar`)"), ("hf", "transformers `generate()`")):
        if any(base in by_method for by_method in summary.values()):
            lines += ["", f"## Speed-up over {title}", "", *leaderboard(summary, base)]
    greedy = not info["temperature"]  # sampled outputs differ by their draws: no audit
    for g in [g for g in list(GROUPS) + ["overall"] if g in summary]:
        lines += ["", f"## {g}", "",
                  "| method | tok/s | × our ar | × our ar, decoding only | × hf plain | τ | "
                  "acceptance | mismatches |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, acc in summary[g].items():
            mismatches = f"{acc['mismatches']}/{acc['prompts']}" if greedy else "-"
            lines.append(
                f"| {name} | {acc['tokens_per_second']:.1f} | {_fmt(acc.get('speedup_vs_ar'), '.2f')}"
                f" | {_fmt(acc.get('decoding_speedup_vs_ar'), '.2f')}"
                f" | {_fmt(acc.get('speedup_vs_hf'), '.2f')} | {_fmt(acc['tau'], '.2f')} | "
                f"{_fmt(acc['acceptance_rate'], '.0%')} | {mismatches} |")
    structured = {name: acc for name, acc in summary.get("overall", {}).items()
                  if acc.get("structured_tokens")}
    if structured:
        lines += ["", "## structured output (questions with a json_schema)", "",
                  "| method | draft tokens the grammar forced, per output token | "
                  "grammar ms per token | grammar share of the time |", "|---|---:|---:|---:|"]
        for name, acc in structured.items():
            share = (acc["grammar_seconds"] / acc["structured_seconds"]
                     if acc["structured_seconds"] else None)
            lines.append(f"| {name} | {acc['forced_share']:.0%} | "
                         f"{acc['grammar_ms_per_token']:.2f} | {_fmt(share, '.1%')} |")
    fim = summary.get("fill-in-the-middle", {})
    if fim and info.get("fim"):
        lines += ["", f"## fill-in-the-middle: latency ({info['fim']['prompts']} middles cut from "
                      f"{info['fim']['modules']} modules of Python {info['fim']['python']}'s "
                      "library)", "",
                  "| method | time to first token, mean ms | whole middle, mean ms | "
                  "tokens per middle | × our ar |", "|---|---:|---:|---:|---:|"]
        for name, acc in fim.items():
            first = (1e3 * acc["first_token_seconds"] / acc["timed_first"]
                     if acc["timed_first"] else None)
            lines.append(f"| {name} | {_fmt(first, '.0f')} | "
                         f"{1e3 * acc['seconds'] / acc['prompts']:.0f} | "
                         f"{acc['tokens'] / acc['prompts']:.1f} | "
                         f"{_fmt(acc.get('speedup_vs_ar'), '.2f')} |")
    if audit is not None:
        lines += ["", *format_audit(audit)]
    return "\n".join(lines)


def format_audit(audit: list[dict]) -> list[str]:
    """One line with the count, then each mismatch with the target's top-2 logit margin where the
    outputs part: below `TIE_MARGIN` it is a numerical tie (explained), otherwise a bug."""
    from .audit import TIE_MARGIN

    ours = [a for a in audit if not a["peer"]]
    unexplained = [a for a in ours if not a["explained"]]
    lines = [f"greedy equality audit (every method vs our ar, token by token): {len(ours)} "
             f"mismatch(es), {len(unexplained)} unexplained (top-2 margin >= {TIE_MARGIN:g})"]
    for a in audit:
        peer = " (a peer: other kernels, for information)" if a["peer"] else ""
        lines.append(f"- question {a['question_id']} turn {a['turn']} `{a['method']}`: first "
                     f"differs at token {a['position']}, top-2 margin {a['margin']:.2e}"
                     f"{' (tie)' if a['explained'] else ''}{peer}")
    return lines
