"""Classic baselines trained on the same rows as the model, scored by the same code.

:mod:`seqcore.baselines.phonetisaurus` runs Phonetisaurus (joint-sequence n-gram WFST), the
G2P baseline a G2P engineer would reach for first. The pair tasks' ``baseline`` piece
(seqcore.tasks.parallel.baseline) wires it to the pipeline's files.
"""
