"""reports/report.md: a human-readable summary of an evaluation, and the CSV writer."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from seqcore.artifacts.train_log import TrainLog
from seqcore.artifacts.train_metrics import TrainMetrics
from seqcore.metrics.evaluation import Evaluation
from seqcore.metrics.failures import KINDS
from seqcore.signature_format import parse_signature

#: (metrics.json key, what it is divided by) for the headline table.
_HEADLINE = (
    ("exact_match", "sequences (`examples`); WER = 1 - exact_match"),
    ("exact_match_multi_ref", "sequences; any reference of the same group counts"),
    ("token_error_rate", "reference tokens (PER for G2P)"),
    ("token_error_rate_multi_ref", "tokens of each sequence's closest reference in its group"),
    ("char_error_rate", "reference characters of the detokenised text, spaces included"),
    ("bleu", "sacrebleu corpus BLEU (`bleu_signature`)"),
    ("chrf", "sacrebleu corpus chrF (`chrf_signature`)"),
    ("ter", "sacrebleu corpus TER (`ter_signature`)"),
    ("tf_token_accuracy", "label tokens (`tf_accuracy_tokens`: targets + EOS)"),
    ("fr_token_accuracy", "reference tokens + EOS (`fr_accuracy_tokens`)"),
    ("exposure_bias_gap", "tf_token_accuracy - fr_token_accuracy"),
)
#: The report's bucket table (buckets.csv has every column).
_BUCKET_COLS = ("bucket", "count", "word_error_rate", "token_error_rate", "exact_match",
                "perplexity", "exposure_bias_gap", "nll_gap")
_SPLIT_KEYS = ("token_nll", "perplexity", "ppl_denominator_tokens", "sequence_mean_nll",
               "sequences", "tf_token_accuracy")


def fmt(value: Any) -> str:
    """Four decimals for floats, plain text otherwise."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4f}"
    return str(value)


def write_csv(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """A CSV with the first row's keys as header (an empty file for no rows)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        if rows:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)


def _table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return ["(no rows)"]
    cols = list(rows[0])
    return (["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            + ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows])


def interval_cell(metrics: dict[str, Any], key: str) -> str:
    """``[low, high]`` of a metric's bootstrap interval, ``-`` without one."""
    bounds = (metrics.get("interval") or {}).get(key) or {}
    if bounds.get("low") is None or bounds.get("high") is None:
        return "-"
    return f"[{fmt(bounds['low'])}, {fmt(bounds['high'])}]"


#: What a resample draws, by the ``by`` field of an interval signature.
RESAMPLED = {"group": "row groups (all references of a word move together)",
             "document": "documents (all tokens of a document move together: one text read "
                         "with one carried state is not a run of independent tokens)"}


def interval_note(sig: str | None) -> list[str]:
    """How the intervals were drawn, from their signature (none without one)."""
    if not sig:
        return []
    fields = parse_signature(sig)
    return [f"Intervals: {fields['ci']} % percentile bootstrap, {fields['bs']} resamples "
            f"of the split's {RESAMPLED.get(fields.get('by', ''), fields.get('by', ''))}, "
            f"seed {fields['rs']} (`{sig}`)."]


def error_names(metrics: dict[str, Any]) -> tuple[str, str, str, str]:
    """The task's names of its two error rates, long and short: WER and PER for G2P; the
    sequence and token error rate for any other parallel data, whose tokens are not phonemes
    nor its sequences words (issue 30). The task is read from the result signature."""
    if parse_signature(metrics.get("signature", "")).get("task") == "g2p":
        return ("WER (word error rate, 1 - exact_match)", "WER",
                "PER (phoneme error rate)", "PER")
    return ("sequence error rate (1 - exact_match)", "sequence error rate",
            "token error rate", "token error rate")


def _lead(metrics: dict[str, Any]) -> list[str]:
    """The two error rates and perplexity first (WER, PER and perplexity for G2P), each with
    its bootstrap interval."""
    split = metrics["split"]
    values = dict(metrics)
    if metrics.get("exact_match_multi_ref") is not None:
        values["word_error_rate_multi_ref"] = 1.0 - metrics["exact_match_multi_ref"]
    seq, seq_short, tok, tok_short = error_names(metrics)
    lead = ((seq, "word_error_rate"),
            (f"{seq_short} against any reference of the group", "word_error_rate_multi_ref"),
            (tok, "token_error_rate"),
            (f"{tok_short} against the closest reference of the group",
             "token_error_rate_multi_ref"),
            (f"perplexity ({split}, teacher-forced, per target token)", f"{split}_perplexity"))
    ci = parse_signature(metrics.get("interval_signature", "ci:95"))
    return ([f"| headline | value | {ci['ci']} % interval |", "|---|---|---|"]
            + [f"| {name} | {fmt(values[k])} | {interval_cell(metrics, k)} |"
               for name, k in lead if k in values] + _compare_note(metrics))


def _compare_note(metrics: dict[str, Any]) -> list[str]:
    note = interval_note(metrics.get("interval_signature"))
    return ["", note[0] + " `python -m pipeline.compare A B` tests a difference between two "
            "results."] if note else []


#: The baseline table's rows: (name, metrics.json key).
_VERSUS = (("WER", "word_error_rate"), ("WER, any reference", "word_error_rate_multi_ref"),
           ("PER", "token_error_rate"), ("PER, closest reference", "token_error_rate_multi_ref"))


def _baseline(metrics: dict[str, Any], decode: dict[str, Any]) -> list[str]:
    """The model beside the baseline (issue 28): each error rate of both, the difference
    with its paired-bootstrap interval, and both p-values; nothing without a baseline.
    Outputs rescored with the baseline's n-best (``decode.rescore``) are named as the
    system combination they are."""
    base, versus = metrics.get("baseline"), metrics.get("vs_baseline")
    if not base or not versus:
        return []
    lines = ["", "## Beside the baseline", "",
             "| metric | model | baseline | model - baseline | interval | p (bootstrap) | "
             "p (randomization) |", "|---|---|---|---|---|---|---|"]
    _, seq, _, tok = error_names(metrics)
    for name, k in _VERSUS:
        name = name.replace("WER", seq).replace("PER", tok)
        v = versus.get(k)
        if v is None or base.get(k) is None or v["delta"] is None:
            continue
        lines.append(f"| {name} | {fmt(base[k] + v['delta'])} | {fmt(base[k])} | "
                     f"{fmt(v['delta'])} | "
                     f"[{fmt(v['low'])}, {fmt(v['high'])}] | {fmt(v['p_bootstrap'])} | "
                     f"{fmt(v['p_randomization'])} |")
    lines += ["", f"Baseline `{metrics.get('baseline_signature', '?')}`: trained on the "
              f"model's {base['train_rows']} train rows ({base['train_rows_left_out']} left out"
              ", listed in the baseline rejects file), scored by the same code as the model. "
              "A negative difference favours the model; p < 0.05 is significant at 5 %."]
    if decode.get("rescore") == "baseline":
        lines += ["", "The model's outputs are a **system combination**: the model rescored "
                  "the baseline's n-best list together with its own beam "
                  f"(`decode.rescore: baseline`, weight {decode.get('rescore_weight')} on the "
                  "baseline's log probability)."]
    return lines


def training_summary(train_metrics: TrainMetrics, train_log: Path) -> list[str]:
    """Steps, epochs and the selected checkpoint, as Markdown lines. The wall time is clock
    time, so never in this DVC-tracked report: it is the MLflow run's ``time/train_s``."""
    log = TrainLog.load(train_log)
    epochs = int(log.rows[-1].epoch) + 1 if log.rows else 0
    wall = "in the MLflow run (time/train_s; clock time is kept out of DVC-tracked files)"
    selected = train_metrics.selected_step
    return [f"Training: {train_metrics.steps} steps, {epochs} epoch(s) started, "
            f"{train_metrics.tokens} target tokens; wall time {wall}; selected "
            f"checkpoint: step {selected} (best dev NLL {fmt(train_metrics.best_dev_nll)} "
            f"at step {train_metrics.best_step})."] + _dev_decoding(train_metrics)


def _dev_decoding(tm: TrainMetrics) -> list[str]:
    """The dev decoding's line (issue 52), when the training decoded a dev sample."""
    if tm.best_dev_wer is None or not math.isfinite(tm.best_dev_wer):
        return []
    return ["", f"Dev decoding while training (a fixed dev sample, train.dev_decode_words): "
            f"lowest dev WER {fmt(tm.best_dev_wer)} at step {tm.best_dev_wer_step}; the "
            f"selected step's dev WER {fmt(tm.selected_dev_wer)}, PER "
            f"{fmt(tm.selected_dev_per)}."]


def _headline(metrics: dict[str, Any]) -> list[str]:
    lines = [f"Split `{metrics['split']}`, {metrics['examples']} sequences.", "",
             "| metric | value | interval | denominator / note |", "|---|---|---|---|"]
    lines += [f"| {k} | {fmt(metrics[k])} | {interval_cell(metrics, k)} | {note} |"
              for k, note in _HEADLINE if k in metrics]
    lines += ["", "Teacher-forced NLL (nats per token; EOS included, PAD and BOS excluded; "
              f"target tokenizer sha256 `{metrics.get('tokenizer_tgt_sha256', '?')}`: "
              "perplexities are comparable only under this tokenizer):", "",
              "| split | " + " | ".join(_SPLIT_KEYS) + " |", "|---" * (len(_SPLIT_KEYS) + 1) + "|"]
    for split in ("dev", "test"):
        if f"{split}_perplexity" in metrics:
            lines.append(f"| {split} | " + " | ".join(fmt(metrics[f"{split}_{k}"])
                                                      for k in _SPLIT_KEYS) + " |")
    lines += ["", "sacrebleu signatures: " + ", ".join(
        f"{k} `{metrics[k + '_signature']}`" for k in ("bleu", "chrf", "ter")
        if k + "_signature" in metrics)]
    return lines


def _failures(ev: Evaluation, rules: dict[str, str]) -> list[str]:
    lines = ["| mode | rule | count | rate | examples (source → hypothesis, ref) |",
             "|---|---|---|---|---|"]
    for kind in KINDS:
        info = ev.failures[kind]
        ex = "<br>".join(f"`{e['source']}` → `{e['hypothesis'] or '∅'}` (`{e['reference']}`)"
                         for e in info["examples"]) or "—"
        lines.append(f"| {kind} | {rules[kind]} | {info['count']} | {fmt(info['rate'])} | {ex} |")
    rep, lr = ev.failures["repeated_ngrams"], ev.failures["length_ratio"]
    lines += ["", f"Repeated n-grams not licensed by the reference: {rep['count']} of "
              f"{rep['ngrams']} hypothesis n-grams = {fmt(rep['rate'])} "
              f"({rules['repeated_ngram_rate']}).", "",
              f"Length ratio ({rules['length_ratio']}): mean {fmt(lr['mean'])}, median "
              f"{fmt(lr['median'])}, share < 0.5: {fmt(lr['below_0.5'])}, share > 1.5: "
              f"{fmt(lr['above_1.5'])}."]
    return lines


def _model_output(metrics: dict[str, Any]) -> list[str]:
    """The model's own output (issue 52): which rows its figures come from, its scores alone
    and the two gaps with their signs."""
    own = metrics.get("model_output")
    if own is None:
        return []
    system = metrics.get("system_output")
    rows = ("the model's own outputs before rescoring (`predictions/<split>.model.jsonl`); the "
            "scored system's output figures are under `system_output` in metrics.json"
            if system else "the scored rows, which are the model's own (no rescoring)")
    lines = ["", "## The model's own output", "",
             f"Free-running accuracy, the exposure-bias gap and the failure modes below are "
             f"measured on {rows}. `exposure_bias_gap` = tf - fr token accuracy (positive: "
             "worse on its own prefixes); `nll_gap` = token NLL of the references - token "
             "NLL of the model's own outputs (positive: the model finds what it writes "
             "likelier than what is right).", "", "| figure | model alone |", "|---|---|"]
    lines += [f"| {k} | {fmt(v)} |" for k, v in own.items()]
    if system:
        fails = ", ".join(f"{k} {system['failures'][k]['count']}" for k in KINDS)
        lines += ["", f"The scored system's own failure counts: {fails}."]
    return lines


def render_report(metrics: dict[str, Any], ev: Evaluation, decode: dict[str, Any],
                  rules: dict[str, str], images: dict[str, str], training: list[str]) -> str:
    """Markdown: WER/PER/perplexity, training summary, headline, bucket, group and
    failure-mode tables, images, exact settings.

    Args:
        metrics: the metrics.json content.
        ev: the evaluation (tables and failure examples).
        decode: the decode settings recorded in the predictions header.
        rules: failure rules in words (FailureRules.describe()).
        images: title -> PNG path relative to the report.
        training: the training summary lines (training_summary()).
    """
    lines = [f"# Evaluation report ({metrics['split']} split)", ""] + _lead(metrics)
    lines += _baseline(metrics, decode)
    lines += [""] + training + ["", "## Headline", ""]
    lines += _headline(metrics)
    lines += ["", "## By reference length", "",
              "Buckets of reference length in tokens (EOS not counted); `count` sequences "
              "each. Every column (BLEU/chrF/TER of the bucket, NLL, accuracies) is in "
              "buckets.csv.", ""]
    lines += _table([{c: b[c] for c in _BUCKET_COLS if c in b} for b in ev.buckets])
    if ev.groups:
        lines += ["", "## By group", "", f"{len(ev.groups)} groups (also in groups.csv).", ""]
        lines += _table(ev.groups[:50])
    lines += _model_output(metrics)
    lines += ["", "## Failure modes", ""] + _failures(ev, rules)
    lines += ["", "## Plots", ""] + [f"![{t}]({p})" for t, p in images.items()]
    sig = metrics["signature"]
    lines += ["", "## Result signature", "", "Quote it beside any number of this report: the "
              "contract (data, tokenizers, lengths, loss), the training contract and model "
              "hashes, the decode and bootstrap settings (docs/mlflow.md).", "",
              f"`{sig}`", "", "| field | value |", "|---|---|"]
    lines += [f"| {part.split(':', 1)[0]} | {part.split(':', 1)[-1]} |" for part in sig.split("|")]
    lines += ["", "## Decode settings", "", "```json", json.dumps(decode, indent=2,
                                                                  sort_keys=True), "```", ""]
    return "\n".join(lines)
