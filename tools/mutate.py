"""Mutation check: break each contract rule and each parameter wiring on purpose, and see that
the tests guarding it fail (`make mutate`; slow, not part of CI; issue 18).

Each mutant is an exact-text edit of one file, applied to a temporary copy of the tree (the
git-tracked and untracked, not ignored, files); the tests named for it run there with
``python -m pytest -x``. A mutant is *caught* when those tests fail, *missed* when they pass.
A mutant whose anchor text is not found exactly once is *stale* (the code drifted: update the
mutant), and one whose tests cannot run is *broken*; both count as failures. Prints one line
per mutant and the score; exits 1 unless every mutant is caught.

    python tools/mutate.py            # all mutants
    python tools/mutate.py -k clip    # mutants whose name contains "clip"
    python tools/mutate.py --list     # names, files and tests, without running
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.git_state import source_files  # noqa: E402


@dataclass(frozen=True)
class Mutant:
    """One rule-breaking edit: replace ``anchor`` (found exactly once) in ``file`` by ``edit``;
    ``tests`` (pytest arguments) must then fail."""

    name: str
    file: str
    anchor: str
    edit: str
    tests: tuple[str, ...]


LOOP = "tests/training/test_loop.py"
LM = "tests/tasks/test_lm.py"
LIVE = "tests/stages/test_params_live.py"


def live(*keys: str) -> str:
    """The liveness cases of some parameters (a ``-k`` expression for test_params_live)."""
    return " or ".join(f"[{k}]" for k in keys)


MUTANTS: list[Mutant] = [
    # -- README rule 1: the shift ------------------------------------------------------------
    Mutant("shift: EOS is not a label", "seqcore/contract.py",
           "labels = list(y) + ([ids.eos] if eos else [])", "labels = list(y) + []",
           ("tests/test_contract.py",)),
    Mutant("shift: decoder input without BOS", "seqcore/contract.py",
           "rows_in.append(([ids.bos] + list(y))[: len(labels)])",
           "rows_in.append((list(y) + [ids.eos])[: len(labels)])",
           ("tests/test_contract.py",)),
    Mutant("shift: PAD positions labelled", "seqcore/contract.py",
           "labels_t = right_padded(rows_lab, width, IGNORE_INDEX)",
           "labels_t = right_padded(rows_lab, width, ids.pad)",
           ("tests/test_contract.py",)),
    # -- rule 2: causal mask -----------------------------------------------------------------
    Mutant("causal: diagonal hidden", "seqcore/contract.py",
           "return torch.ones(size, size, dtype=torch.bool, device=device).tril()",
           "return torch.ones(size, size, dtype=torch.bool, device=device).tril(-1)",
           ("tests/models/test_rules_masks.py", "tests/test_contract.py", "-k", "causal")),
    Mutant("causal: future visible", "seqcore/contract.py",
           "return torch.ones(size, size, dtype=torch.bool, device=device).tril()",
           "return torch.ones(size, size, dtype=torch.bool, device=device).tril(1)",
           ("tests/models/test_rules_masks.py", "-k", "causal")),
    # -- rule 3: masks act on keys -----------------------------------------------------------
    Mutant("masks: encoder self-attention reads PAD keys", "seqcore/models/transformer.py",
           "mask = attention_mask(src_mask, src.shape[1], causal=False)",
           "mask = attention_mask(torch.ones_like(src_mask), src.shape[1], causal=False)",
           ("tests/models/test_rules_masks.py", "-k", "masks_act_on_keys")),
    Mutant("masks: polarity flipped in masked_softmax", "seqcore/contract.py",
           "return torch.softmax(scores.masked_fill(~allowed, -torch.inf), dim=-1)",
           "return torch.softmax(scores.masked_fill(allowed, -torch.inf), dim=-1)",
           ("tests/models/test_rules_masks.py", "-k", "masks_act_on_keys")),
    # -- rule 4: cross-attention masks source PAD --------------------------------------------
    Mutant("cross-attention: transformer reads source PAD", "seqcore/models/transformer.py",
           "cross_mask = attention_mask(memory.mask, t, causal=False)",
           "cross_mask = attention_mask(torch.ones_like(memory.mask), t, causal=False)",
           ("tests/models/test_rules_models.py", "-k", "cross_attention")),
    Mutant("cross-attention: rnn reads source PAD", "seqcore/models/rnn.py",
           "return masked_softmax(scores, memory.mask[:, None, :])",
           "return torch.softmax(scores, dim=-1)",
           ("tests/models/test_rules_models.py", "-k", "cross_attention")),
    # -- rule 5: RNN packing -----------------------------------------------------------------
    Mutant("packing: rnn encoder runs over PAD", "seqcore/models/rnn.py",
           "packed = pack_padded_sequence(emb, lengths.clamp(min=1).cpu(),",
           "packed = pack_padded_sequence(emb, torch.full_like(lengths, emb.shape[1]).cpu(),",
           ("tests/models/test_rules_models.py", "-k", "padding_invariance")),
    Mutant("packing: PAD states not zeroed", "seqcore/models/rnn.py",
           "states = states * src_mask[..., None]", "states = states * 1",
           ("tests/models/test_rnn.py", "-k", "empty_source")),
    # -- rule 6: fully masked rows -----------------------------------------------------------
    Mutant("fully masked rows: attention_mask leaves them closed", "seqcore/contract.py",
           "    return mask | empty\n", "    return mask\n",
           ("tests/models/test_rules_masks.py", "tests/test_contract.py", "-k", "fully_masked")),
    Mutant("fully masked rows: masked_softmax leaves them closed", "seqcore/contract.py",
           "allowed = allowed | ~allowed.any(dim=-1, keepdim=True)", "allowed = allowed",
           ("tests/models/test_rules_masks.py", "-k", "fully_masked")),
    # -- rule 7: loss ignores PAD, smoothing without PAD/BOS mass ----------------------------
    Mutant("loss: smoothing puts mass on excluded ids", "seqcore/losses.py",
           "allowed[excluded_id] = False", "allowed[excluded_id] = True",
           ("tests/test_losses.py", "-k", "smoothing")),
    Mutant("loss: PAD positions counted", "seqcore/losses.py",
           "counts=torch.stack([per_seq_tokens.sum(), has_tokens.sum()])",
           "counts=torch.stack([torch.tensor(labels.numel()), has_tokens.sum()])",
           ("tests/test_losses.py", "-k", "ignores_pad")),
    Mutant("wiring: training feed smooths onto PAD and BOS", "seqcore/training/feeds.py",
           "return sequence_loss(logits, batch.tf.labels, self.norm, self.smoothing,\n"
           "                             (self.ids.pad, self.ids.bos))",
           "return sequence_loss(logits, batch.tf.labels, self.norm, self.smoothing, ())",
           (LOOP, LM, "-k", "minimises")),
    Mutant("wiring: lm feed smooths onto PAD and BOS", "seqcore/tasks/lm/feed.py",
           "out, self.carried = segment_loss(model, batch, state, self.norm, self.smoothing,\n"
           "                                         (self.ids.pad, self.ids.bos))",
           "out, self.carried = segment_loss(model, batch, state, self.norm, self.smoothing, ())",
           (LOOP, LM, "-k", "minimises")),
    # -- rule 8: explicit normalisation, accumulation ----------------------------------------
    Mutant("normalisation: sequence-mean averages per sequence twice", "seqcore/losses.py",
           "total = per_seq.sum()", "total = per_seq.mean()",
           ("tests/test_losses.py", LOOP, "-k", "normalisation")),
    Mutant("accumulation: each micro-batch divided by its own count", "seqcore/training/loop.py",
           "self.scaler.scale(out.total / denominator).backward()",
           "self.scaler.scale(out.total / max(feed.count(b), 1)).backward()",
           (LOOP, LM, "-k", "minimises")),
    Mutant("wiring: sequence-mean counts tokens", "seqcore/training/feeds.py",
           "return batch.targets if self.norm", "return batch.tokens if self.norm",
           (LOOP, LM, "-k", "minimises")),
    Mutant("wiring: feed ignores sequence.loss_norm", "seqcore/training/feeds.py",
           "self.ids, self.norm, self.smoothing = ids, seq.loss_norm, seq.label_smoothing",
           'self.ids, self.norm, self.smoothing = ids, "token-mean", seq.label_smoothing',
           (LOOP, LM, "-k", "minimises")),
    Mutant("wiring: feed ignores sequence.label_smoothing", "seqcore/training/feeds.py",
           "self.ids, self.norm, self.smoothing = ids, seq.loss_norm, seq.label_smoothing",
           "self.ids, self.norm, self.smoothing = ids, seq.loss_norm, 0.1",
           (LOOP, LM, "-k", "minimises")),
    Mutant("wiring: train.accum_steps ignored", "seqcore/training/loop.py",
           "batches = [feed.draw() for _ in range(cfg.accum_steps)]",
           "batches = [feed.draw() for _ in range(1)]",
           (LOOP, LM, "-k", "minimises")),
    # -- rule 9: special ids from the tokenizer contract -------------------------------------
    Mutant("special ids: hard-coded in the feed", "seqcore/training/feeds.py",
           "(self.ids.pad, self.ids.bos))", "(0, 2))",
           ("tests/test_rules_special_ids.py", LOOP, LM, "-k", "special_ids or minimises")),
    # -- rule 10: eval() is deterministic ----------------------------------------------------
    Mutant("eval: attention dropout stays on", "seqcore/models/transformer.py",
           "p = self.dropout if self.training else 0.0", "p = self.dropout",
           ("tests/models/test_rules_models.py", "-k", "eval_is_deterministic")),
    Mutant("eval: decoding allowed in train mode", "seqcore/decoding/search.py",
           "    if model.training:\n        raise", "    if False:\n        raise",
           ("tests/decoding/test_decoding.py", "-k", "eval_mode")),
    # -- loop rules: unscale, finiteness, clipping -------------------------------------------
    Mutant("AMP: clip before unscale", "seqcore/training/loop.py",
           "        self.scaler.unscale_(self.opt)\n"
           "        return clip_global_norm(self.model, self.cfg.clip_norm)\n",
           "        norm = clip_global_norm(self.model, self.cfg.clip_norm)\n"
           "        self.scaler.unscale_(self.opt)\n"
           "        return norm\n",
           (LOOP, "-k", "unscale")),
    Mutant("clipping: train.clip_norm ignored", "seqcore/training/optim.py",
           "max_norm = clip_norm if clip_norm > 0 else math.inf",
           "max_norm = math.inf",
           (LOOP, "-k", "clipping")),
    Mutant("skipping: non-finite steps taken", "seqcore/training/loop.py",
           "            if finite:\n                self.scaler.step(self.opt)",
           "            if True:\n                self.scaler.step(self.opt)",
           (LOOP, "-k", "non_finite")),
    Mutant("skipping: the fused optimiser steps on a non-finite norm", "seqcore/training/optim.py",
           "opt.found_inf = None, found_inf", "opt.found_inf = None, None",
           (LOOP, "-k", "non_finite")),
    # -- TBPTT -------------------------------------------------------------------------------
    Mutant("TBPTT: state not detached", "seqcore/models/rnnlm.py",
           "return tuple(t.detach() for t in state)", "return tuple(state)",
           (LM, "-k", "gradient_stops")),
    Mutant("TBPTT: state never reset", "seqcore/models/rnnlm.py",
           "keep = (~reset).to(state[0].dtype)[None, :, None]",
           "keep = torch.ones_like(reset).to(state[0].dtype)[None, :, None]",
           (LM, "-k", "reset or zero_state")),
    # -- beam stopping -----------------------------------------------------------------------
    Mutant("beam: stops on the next-step bound only", "seqcore/decoding/beam.py",
           "bound = torch.maximum(live / lp_next, live / lp_cap).amax(dim=1)",
           "bound = (live / lp_next).amax(dim=1)",
           ("tests/decoding/test_decoding.py", "-k", "exhaustive")),
    Mutant("beam: stops before n_best are finished", "seqcore/decoding/beam.py",
           "    return nth >= bound  #", "    return nth >= bound - 1e9  #",
           ("tests/decoding/test_decoding.py", "-k", "exhaustive")),
    # -- eval mode in the passes behind reported numbers (wiring) ----------------------------
    Mutant("wiring: teacher-forced passes in train mode", "seqcore/sequences.py",
           "    model.eval()\n    device", "    device",
           (LOOP, LM, "tests/metrics/test_teacher.py", "-k", "dropout_off")),
    Mutant("wiring: lm dev NLL in train mode", "seqcore/tasks/lm/feed.py",
           "    model.eval()\n    batcher", "    batcher",
           (LM, "-k", "lm_dev")),
    # -- decode parameters reach the search (wiring) -----------------------------------------
    Mutant("wiring: make_decoder drops length_norm and alpha", "seqcore/decoding/factory.py",
           "BeamSettings(cfg.beam_size, cfg.n_best, cfg.length_norm, cfg.alpha)",
           "BeamSettings(cfg.beam_size, cfg.n_best)",
           ("tests/decoding/test_factory.py", "-k", "make_decoder")),
    Mutant("wiring: make_decoder drops alpha", "seqcore/decoding/factory.py",
           "BeamSettings(cfg.beam_size, cfg.n_best, cfg.length_norm, cfg.alpha)",
           "BeamSettings(cfg.beam_size, cfg.n_best, cfg.length_norm)",
           ("tests/decoding/test_factory.py", "-k", "make_decoder")),
    Mutant("wiring: make_decoder drops decode.seed", "seqcore/decoding/factory.py",
           "SamplingSettings(cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed)",
           "SamplingSettings(cfg.temperature, cfg.top_k, cfg.top_p)",
           ("tests/decoding/test_factory.py", "-k", "make_decoder")),
    Mutant("wiring: make_decoder drops top_k", "seqcore/decoding/factory.py",
           "SamplingSettings(cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed)",
           "SamplingSettings(cfg.temperature, 0, cfg.top_p, cfg.seed)",
           ("tests/decoding/test_factory.py", "-k", "make_decoder")),
    Mutant("wiring: make_decoder drops temperature", "seqcore/decoding/factory.py",
           "SamplingSettings(cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed)",
           "SamplingSettings(1.0, cfg.top_k, cfg.top_p, cfg.seed)",
           ("tests/decoding/test_factory.py", "-k", "make_decoder")),
    Mutant("wiring: the decoder ignores its beam settings", "seqcore/decoding/factory.py",
           "return beam_search(model, src, mask, ids, caps, self.beam, self.masking,",
           "return beam_search(model, src, mask, ids, caps, BeamSettings(), self.masking,",
           ("tests/decoding/test_factory.py", "-k", "make_decoder")),
    Mutant("wiring: the decoder ignores max_len_ratio", "seqcore/decoding/factory.py",
           "        if self.max_len_ratio > 0:\n", "        if False:\n",
           ("tests/decoding/test_factory.py", "-k", "make_decoder")),
    Mutant("wiring: make_decoder drops min_len", "seqcore/decoding/factory.py",
           "return Masking(min_len=cfg.min_len, no_repeat_ngram=cfg.no_repeat_ngram,",
           "return Masking(min_len=0, no_repeat_ngram=cfg.no_repeat_ngram,",
           ("tests/decoding/test_factory.py", "-k", "make_decoder")),
    # -- parameters reach the stages (tests/stages/test_params_live.py) ---------------------
    Mutant("param: train.weight_decay not given to the optimiser", "seqcore/training/loop.py",
           "cfg.betas, cfg.eps, cfg.weight_decay,", "cfg.betas, cfg.eps, 0.0,",
           (LIVE, "-k", live("train.weight_decay", "train.optimizer"))),
    Mutant("param: scheduled sampling never on", "seqcore/training/loop.py",
           "ss_prob = 0.0 if mrt else scheduled_sampling_probability(\n"
           "            s.step, cfg.ss_schedule, cfg.ss_k, cfg.ss_cap)", "ss_prob = 0.0",
           (LIVE, "-k", live("train.ss_schedule"))),
    Mutant("param: train.select ignored", "seqcore/training/select.py",
           '    if best is not None:\n        setup.model.load_state_dict(',
           "    if False:\n        setup.model.load_state_dict(",
           (LIVE, "-k", "select_best_dev")),
    Mutant("param: evaluate.examples_per_failure ignored", "seqcore/metrics/recompute.py",
           "FailureRules(ev.repeat_ngram, ev.repeat_times, ev.examples_per_failure)",
           "FailureRules(ev.repeat_ngram, ev.repeat_times)",
           (LIVE, "-k", live("evaluate.examples_per_failure"))),
    Mutant("param: decode.length_norm dropped (stage level)", "seqcore/decoding/factory.py",
           "BeamSettings(cfg.beam_size, cfg.n_best, cfg.length_norm, cfg.alpha)",
           "BeamSettings(cfg.beam_size, cfg.n_best)",
           (LIVE, "-k", live("decode.length_norm", "decode.alpha"))),
    Mutant("param: decode.seed dropped (stage level)", "seqcore/decoding/factory.py",
           "SamplingSettings(cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed)",
           "SamplingSettings(cfg.temperature, cfg.top_k, cfg.top_p)",
           (LIVE, "-k", live("decode.seed"))),
    # since issue 34 the tokenizer signs no loss setting: train's contract does
    Mutant("param: train stage does not declare the loss settings it signs", "dvc.yaml",
           "      - task\n      - sequence.loss_norm\n      - sequence.label_smoothing\n"
           "      - sequence.max_src_len",
           "      - task\n      - sequence.max_src_len",
           ("tests/stages/test_declared_reads.py", "-k", "params_are_exactly and train")),
    # -- the baseline and the system combination (issue 28) --------------------------------
    Mutant("rescore: the weight on the model's side", "seqcore/decoding/rescore.py",
           "return (1.0 - weight) * self.model + weight * self.baseline",
           "return weight * self.model + (1.0 - weight) * self.baseline",
           ("tests/decoding/test_rescore.py",)),
    Mutant("rescore: the EOS label left out of the model's score", "seqcore/decoding/rescore.py",
           "out += (picked * valid).sum(1).tolist()",
           "out += (picked * valid)[:, :-1].sum(1).tolist()",
           ("tests/decoding/test_rescore.py",)),
    Mutant("baseline: a row the aligner dropped counted as aligned",
           "seqcore/baselines/phonetisaurus.py",
           "        if left[r.source, r.target] > 0:",
           "        if left[r.source, r.target] >= 0:",
           ("tests/baselines/test_phonetisaurus.py", "-k", "aligner")),
    # -- issue 32: bugs written independently of this list, each once missed by every test --
    Mutant("unplanted: the GradScaler state not restored on resume", "seqcore/training/loop.py",
           '        self.scaler.load_state_dict(c.scaler)', "        pass",
           ("tests/training/test_resume.py", "-k", "grad_scaler")),
    Mutant("unplanted: the truncated failure mode never set", "seqcore/metrics/failures.py",
           '    if not row.eos:\n        found.add("truncated")',
           '    if False:\n        found.add("truncated")',
           ("tests/metrics/test_failures.py", "tests/decoding/test_predictions.py", "-k",
            "truncated")),
    Mutant("unplanted: the audit treats every TSV as equal", "seqcore/compare.py",
           'return list(csv.reader(io.StringIO(text), delimiter="\\t" if kind == ".tsv" else ","))',
           'return [] if kind == ".tsv" else list(csv.reader(io.StringIO(text)))',
           ("tests/audit/test_comparators.py",)),
    Mutant("unplanted: the consecutive-skip counter never reset", "seqcore/training/loop.py",
           "            s.consecutive_skips = 0", "            pass",
           ("tests/training/test_resume.py", "-k", "consecutive")),
    Mutant("unplanted: the UNK-rate guard stops at its threshold", "seqcore/data/coverage.py",
           "for split, st in stats.items() if st.rate > max_unk_rate]",
           "for split, st in stats.items() if st.rate >= max_unk_rate]",
           ("tests/data/test_coverage.py", "tests/config/test_config_ranges.py", "-k",
            "unk_rate")),
    Mutant("unplanted: an upper bound dropped from the range table", "seqcore/config_ranges.py",
           '"model.rnn.dropout": "[0, 1)",', '"model.rnn.dropout": "[0, inf)",',
           ("tests/config/test_config_ranges.py", "-k", "range")),
    Mutant("unplanted: scheduled sampling feeds the unshifted predictions",
           "seqcore/training/scheduled_sampling.py",
           "shifted = torch.cat([tf.inputs[:, :1], predictions[:, :-1]], dim=1)",
           "shifted = predictions",
           (LOOP, "-k", "scheduled_sampling")),
    Mutant("unplanted: the learning-rate schedule one step late", "seqcore/training/loop.py",
           "s.step + 1, cfg.schedule, cfg.lr,", "s.step, cfg.schedule, cfg.lr,",
           (LOOP, "-k", "one_step_late or first_step")),
    Mutant("unplanted: the lm dev NLL without the carried state", "seqcore/tasks/lm/feed.py",
           "return lm_nll(model, self.dev_docs, self.ids, self.streams, self.bptt, carry=True)",
           "return lm_nll(model, self.dev_docs, self.ids, self.streams, self.bptt, carry=False)",
           (LM, "-k", "dev_nll_of_training")),
    Mutant("unplanted: the epoch (and its shuffle) not restored on resume",
           "seqcore/training/feeds.py",
           'self.sampler.load(SamplerState(state["epoch"], state["cursor"]))',
           'self.sampler.load(SamplerState(0, state["cursor"]))',
           ("tests/training/test_resume.py", "-k", "epoch and not sigkill")),
]


def copy_tree(dest: Path) -> None:
    for name in source_files(REPO):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)


def run_tests(tree: Path, tests: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    return subprocess.run(cmd, cwd=tree, capture_output=True, text=True)


def check(tree: Path, m: Mutant) -> str:
    """caught, missed, stale or broken."""
    path = tree / m.file
    original = path.read_text(encoding="utf-8")
    if original.count(m.anchor) != 1:
        return f"stale ({original.count(m.anchor)} matches of the anchor in {m.file})"
    path.write_text(original.replace(m.anchor, m.edit), encoding="utf-8")
    try:
        res = run_tests(tree, m.tests)
    finally:
        path.write_text(original, encoding="utf-8")
    # pytest exit codes: 0 all passed, 1 some failed; anything else = the tests did not run.
    if res.returncode == 1:
        failed = [ln for ln in res.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
        return "caught" + (f" by {failed[0].split()[1]}" if failed else "")
    if res.returncode == 0:
        return "missed"
    return f"broken (pytest exit {res.returncode}: {res.stdout.strip().splitlines()[-1:]})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only mutants whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args()
    mutants = [m for m in MUTANTS if args.k in m.name]
    if args.list:
        for m in mutants:
            print(f"{m.name} | {m.file} | {' '.join(m.tests)}")
        return
    with tempfile.TemporaryDirectory(prefix="seqcore-mutate-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        probe = subprocess.run([sys.executable, "-c", "import seqcore; print(seqcore.__file__)"],
                               cwd=tree, capture_output=True, text=True, check=True).stdout
        if not Path(probe.strip()).resolve().is_relative_to(tree.resolve()):
            sys.exit(f"the copy imports seqcore from {probe.strip()}, not from {tree}")
        results = []
        for m in mutants:
            t0 = time.monotonic()
            outcome = check(tree, m)
            results.append(outcome)
            print(f"{outcome.split()[0]:7s} {time.monotonic() - t0:5.1f}s  {m.name}\n"
                  f"        {outcome}", flush=True)
    caught = sum(r.startswith("caught") for r in results)
    print(f"mutation score: {caught}/{len(results)} caught "
          f"({100 * caught / max(len(results), 1):.0f}%)")
    if caught != len(results):
        sys.exit(1)


if __name__ == "__main__":
    main()
