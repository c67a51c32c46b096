"""Reading raw data, splitting it, and batching encoded examples."""
