"""Model families, chosen by ``model.family`` in params.yaml."""

from __future__ import annotations

from seqcore.config import ModelConfig
from seqcore.models.base import EncoderDecoder
from seqcore.models.transformer import Transformer, TransformerShape


def build_model(
    cfg: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int, max_len: int
) -> EncoderDecoder:
    """Build the configured encoder-decoder.

    Args:
        cfg: the model section.
        src_vocab, tgt_vocab: vocabulary sizes (from the tokenizer contract).
        pad_id: the PAD id (embedding rows that get no gradient).
        max_len: the longest position the model must embed.
    """
    if cfg.family == "transformer":
        t = cfg.transformer
        return Transformer(TransformerShape(
            src_vocab=src_vocab, tgt_vocab=tgt_vocab, d_model=t.d_model, n_heads=t.n_heads,
            enc_layers=t.enc_layers, dec_layers=t.dec_layers, d_ff=t.d_ff, dropout=t.dropout,
            norm_first=t.norm_first, positions=t.positions, tie_embeddings=t.tie_embeddings,
            max_len=max_len, pad_id=pad_id, attention_kernel=t.attention_kernel,
        ))
    from seqcore.models.rnn import RNNSeq2Seq, RNNShape  # noqa: PLC0415 (keeps import order flat)

    r = cfg.rnn
    return RNNSeq2Seq(RNNShape(
        cell=cfg.family, src_vocab=src_vocab, tgt_vocab=tgt_vocab, embed_dim=r.embed_dim,
        hidden=r.hidden, enc_layers=r.enc_layers, dec_layers=r.dec_layers, dropout=r.dropout,
        attention=r.attention, pad_id=pad_id,
    ))
