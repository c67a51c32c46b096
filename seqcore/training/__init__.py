"""Losses, schedules, batching state, checkpoints and the training loop."""
