"""The pair tasks' piece of the decode stage: predictions for the encoded split."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from seqcore.artifacts.model_file import ModelFile
from seqcore.artifacts.baseline import BaselineRecord
from seqcore.artifacts.predictions import (
    PredictionRow, Predictions, PredictionsHeader, model_rows_path)
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config, DecodeConfig
from seqcore.data.examples import Example, read_encoded
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from seqcore.decoding.rescore import rescore
from seqcore.determinism import resolve_device, set_determinism
from seqcore.hashing import sha256_file
from seqcore.tasks import TaskError
from seqcore.tasks.base import StageIO
from seqcore.models.base import EncoderDecoder
from seqcore.tokenizer import Tokenizers, load_tokenizers


def baseline_rows(cfg: Config) -> tuple[dict[str, PredictionRow] | None, str | None]:
    """The baseline's rows of ``decode.split`` by id (decode.rescore: baseline), or None and
    why not: the baseline stage skipped this data (e.g. sentence pairs under
    ``baseline.kind: auto``), so the model's own outputs stand, as for any ignored setting."""
    record = BaselineRecord.load(cfg.paths.baseline)
    if not record.present:
        return None, (f"decode.rescore = 'baseline' is ignored: the baseline stage skipped "
                      f"this data ({record.skipped})")
    path = Path(cfg.paths.baseline) / f"{cfg.decode.split}.jsonl"
    return {r.id: r for r in Predictions.load(path).rows}, None


def checked_baseline(cfg: Config, examples: list[Example],
                     io: StageIO) -> tuple[dict[str, PredictionRow] | None, str | None]:
    """The baseline's rows to rescore ``examples`` with under ``decode.rescore: baseline`` (None
    otherwise), and the note the header keeps when the setting was ignored.

    Raises:
        TaskError: the baseline's rows do not cover the decoded ones (a stale baseline).
    """
    if cfg.decode.rescore != "baseline":
        return None, None
    base, note = baseline_rows(cfg)
    if base is None:
        io.note(note or "")
        return None, note
    missing = [e.id for e in examples if e.id not in base]
    if missing:
        raise TaskError(f"{cfg.paths.baseline}/{cfg.decode.split}.jsonl lacks {len(missing)} "
                        f"decoded row(s) (first {missing[0]!r}); re-run the baseline stage")
    return base, None


@dataclass(frozen=True)
class Decoded:
    """The model's own outputs and the decoding system's answer (the same list without
    rescoring), one row per example in order."""

    model: list[PredictionRow]
    system: list[PredictionRow]


def system_rows(model: EncoderDecoder, examples: list[Example], toks: Tokenizers,
                decode: DecodeConfig, base: dict[str, PredictionRow] | None,
                chunks: Callable[[list[Example]], Iterable[Sequence[Example]]] | None = None,
                note: Callable[[str], None] | None = None) -> list[PredictionRow]:
    """What the decoding system answers for ``examples`` (:func:`decoded`'s ``system``): the
    one path of the decode stage and of serving (``seqcore.predictor``)."""
    return decoded(model, examples, toks, decode, base, chunks, note).system


def decoded(model: EncoderDecoder, examples: list[Example], toks: Tokenizers,
            decode: DecodeConfig, base: dict[str, PredictionRow] | None,
            chunks: Callable[[list[Example]], Iterable[Sequence[Example]]] | None = None,
            note: Callable[[str], None] | None = None) -> Decoded:
    """The model's outputs for ``examples``, and the system's: those rescored with the
    baseline's n-best ``base`` (rows by example id) when given. The same examples in the
    same order give the same rows, byte for byte.

    Args:
        chunks: cuts ``examples`` into whole batches for progress (the batches, and so the
            rows, are those of one pass over all of them).
        note: told when the rescoring starts and ends (progress lines; issue 55).
    """
    decoder, bs = make_decoder(decode, toks.ids), decode.batch_size
    with torch.inference_mode():
        rows = [row for chunk in (chunks(examples) if chunks else [examples])
                for row in decode_examples(model, list(chunk), decoder, toks.ids, toks.tgt, bs)]
        own = rows
        if base is not None:
            started = time.monotonic()
            if note:
                note(f"rescoring {len(rows):,} rows: each with the baseline's n-best and its own "
                     "outputs, scored by the model")
            rows = rescore(model, examples, rows, base, toks.tgt, toks.ids,
                           decode.rescore_weight, bs)
            if note:
                note(f"{len(rows):,} rows rescored in {time.monotonic() - started:.0f} s "
                     f"(decode.rescore_weight {decode.rescore_weight:g})")
    return Decoded(own, rows)


def decode(cfg: Config, io: StageIO) -> None:
    """Write ``predictions/<decode.split>.jsonl`` and its header.

    Raises:
        TaskError: decode.max_len beyond the model's position range.
    """
    saved = ModelFile.load(cfg.paths.model)
    model, meta = saved.build(), saved.meta
    tc = TokenizerContract.load(cfg.paths.tokenizer_contract)
    sig = io.contract(meta.signature, cfg.paths.model, tc)
    toks = load_tokenizers(cfg.paths.tokenizer_contract, meta.tokenizer_sha256(), tc)
    tgt_tok = toks.tgt
    if any(t >= tgt_tok.vocab_size for t in cfg.decode.banned_tokens):
        raise TaskError(f"decode.banned_tokens = {list(cfg.decode.banned_tokens)}: ids must be < "
                        f"the target vocabulary size ({tgt_tok.vocab_size}, "
                        f"{cfg.paths.tokenizer_contract})")
    if model.max_positions is not None and cfg.decode.max_len > model.max_positions:
        raise TaskError(
            f"decode.max_len ({cfg.decode.max_len}) is longer than the model's position "
            f"range ({model.max_positions} = max(sequence.max_src_len, "
            "sequence.max_tgt_len) + 1); lower decode.max_len or retrain with a larger "
            "sequence.max_tgt_len")
    device = resolve_device(cfg.decode.device)
    # The thread count the model was trained with (float sums depend on the split); read
    # from the model file, so decode declares no train param.
    set_determinism(cfg.decode.seed, meta.threads, device)
    model.to(device)  # the model file loads on the CPU whatever device trained it
    examples = read_encoded(cfg.paths.encoded, cfg.decode.split)
    base, note = checked_baseline(cfg, examples, io)
    out_rows = decoded(model, examples, toks, cfg.decode, base,
                       lambda items: io.chunks(items, cfg.decode.batch_size, "decode"), io.note)
    rows = out_rows.system
    out = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
    Predictions(rows).save(out)
    if base is not None:  # the model's figures are measured on its own output (issue 52)
        Predictions(out_rows.model).save(model_rows_path(out))
    else:  # one system: no file of an earlier, rescored run may stand beside its rows
        model_rows_path(out).unlink(missing_ok=True)
    PredictionsHeader(
        cfg.decode, sha256_file(Path(cfg.paths.model)), len(rows), sig,
        trained_on=meta.trained_on(), tokenizer_sha256=tc.sha256(), note=note).save(out)
    io.note(f"{len(rows)} {cfg.decode.split} examples -> {out}")
