"""Programs the tests run in their own processes (``python -m tests.programs.<name>``)."""
