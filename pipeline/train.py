"""Stage train: resume from the newest good checkpoint (if any) and train to max_steps."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from pipeline.stage import load, signature, tokenizer_contract, write_json
from seqcore.contract import SpecialIds
from seqcore.data.examples import read_examples
from seqcore.models import build_model
from seqcore.hashing import digest
from seqcore.signature import training_contract
from seqcore.training.checkpoint import CheckpointDir, load_blob
from seqcore.training.loop import LOG_COLUMNS, Trainer, set_determinism
from seqcore.training.model_file import ModelInfo, save_model


def main() -> None:
    cfg = load(__doc__)
    tc = tokenizer_contract(cfg)
    sig = signature(cfg, "train", tc.get("signature"), f"{cfg.paths.tokenizer}/contract.json")
    ids = SpecialIds(**tc["special_ids"])
    set_determinism(cfg.train.seed, cfg.train.threads)
    enc = Path(cfg.paths.encoded)
    data = (read_examples(enc / "train.jsonl"), read_examples(enc / "dev.jsonl"))
    max_len = max(cfg.sequence.max_src_len, cfg.sequence.max_tgt_len, cfg.decode.max_len) + 1
    info = ModelInfo(cfg.model, tc["src"]["vocab_size"], tc["tgt"]["vocab_size"], ids.pad, max_len)
    model = build_model(info.model, info.src_vocab, info.tgt_vocab, info.pad_id, info.max_len)
    contract = training_contract(cfg, tc)
    ckpt = CheckpointDir(Path(cfg.paths.checkpoints) / digest(contract)[:12], cfg.train.keep_last)
    trainer = Trainer(model, cfg.train, cfg.sequence, ids, data, ckpt, contract,
                      cfg.model.transformer.d_model)
    resumed = trainer.resume()
    print(f"[train] {'resumed from ' + resumed if resumed else 'fresh start'} in {ckpt.root}",
          file=sys.stderr)
    log_path = Path(cfg.paths.train_log)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(LOG_COLUMNS)
        writer.writerows(row + [""] for row in trainer.state.history)

        def log(row: list[float]) -> None:
            writer.writerow(row)
            f.flush()
            if not sys.stderr.isatty() and row[0] % cfg.train.log_every == 0:
                print(f"[train] step {row[0]:.0f} loss {row[3]:.4f} lr {row[2]:.2e} "
                      f"dev_nll {row[7]:.4f} tok/s {row[-1]:.0f}", file=sys.stderr)

        state = trainer.run(log)
    best = ckpt.root / "best.pt"
    if cfg.train.select == "best_dev" and best.exists():
        model.load_state_dict(load_blob(best)["model"])
    meta = {"signature": sig, "step": state.step, "select": cfg.train.select,
            "best_step": state.best_step, "best_dev_nll": state.best_dev,
            "training_contract": contract}
    sha = save_model(Path(cfg.paths.model), model, info, meta)
    write_json(cfg.paths.train_metrics, {
        "steps": state.step, "tokens": state.tokens, "skipped_steps": state.skipped,
        "best_step": state.best_step, "best_dev_nll": state.best_dev,
        "final_loss": state.history[-1][3] if state.history else None,
        "model_sha256": sha, "selected": cfg.train.select})


if __name__ == "__main__":
    main()
