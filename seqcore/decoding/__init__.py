"""Decoding: search and sampling over a model's next-token distribution."""
