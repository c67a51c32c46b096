"""The verifier (issue 50): ``python -m pipeline.audit`` checks a pipeline result from its
locked inputs, one package with one options object (options.py).

core.py runs the checks in order; checks.py, lock.py (DVC's hashes), rederive.py (stages redone
in a temporary folder), replay.py (the training ledger replayed in a child), mlflow_run.py and
lineage.py (the MLflow run and registered version), rebuild.py (``--rebuild``), run.py (``--run
RUN_ID``: the result a run claims, checked out first), verdict.py (what is written back) and
cli.py (the command line). The package imports nothing on import: each module its own.
"""
