"""Typed artifacts: one frozen class per file that crosses a stage boundary.

Each class owns its file's format: one reader (``load``), one writer (``save``) and a
``SCHEMA_VERSION`` the reader checks (STYLE.md rule 13). Nothing outside this package reads
or writes these files by key. The modules are imported one by one (``seqcore.artifacts.
predictions`` pulls in no torch), so this package file imports none of them.

- tokenizer_contract: ``tokenizer/contract.json`` -> :class:`TokenizerContract`
- model_file: ``models/model.pt`` -> :class:`ModelFile` (weights, build info, :class:`ModelMeta`)
- predictions: ``predictions/<split>.jsonl`` and its ``.header.json`` -> :class:`PredictionRow`,
  :class:`PredictionsHeader`
- reports: ``reports/metrics.json``, ``results.json``, ``headline.json`` -> :class:`Metrics`,
  :class:`Results`, :class:`Headline`
- manifests: ``data/prepared/manifest.json`` and ``data/encoded/manifest.json`` ->
  :class:`PreparedManifest`, :class:`EncodedManifest`
- coverage: ``reports/coverage.json`` -> :class:`Coverage` (of :class:`SplitCoverage`)
- train_metrics: ``reports/train_metrics.json`` -> :class:`TrainMetrics`
- train_log: ``reports/train_log.csv`` -> :class:`TrainLog` (of :class:`StepLog`)
- run_record: one MLflow run as plain data (kept in the pending file) -> :class:`RunRecord`
- result_files: the files of one result, loaded as the audit asks -> :class:`ResultFiles`
"""
