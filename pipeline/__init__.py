"""Thin DVC stage entry points: read params, call seqcore, write declared outputs."""
