"""Metric statistics (kept separate from scores) and their signatures."""
