"""``python -m pipeline.audit``: see pipeline/audit/cli.py."""

from pipeline.audit.cli import main

main()
