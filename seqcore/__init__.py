"""seqcore: reproducible training, decoding and evaluation of sequence models."""

__version__ = "0.1.0"
