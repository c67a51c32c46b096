"""The ``lm`` task: plain-text documents in, a stateful RNN language model trained with
truncated BPTT, perplexity out (with the state carried across segments and reset at each).

One module per stage (seqcore.tasks), and ``corpus`` for the documents train and evaluate
read. It reads its documents itself (seqcore.data.documents) under the same data policy as
the parallel tasks: ``data.bad_rows`` and ``data.max_pairs``. The prepare and tokenizer stages
still run on the raw file's pairs (the pipeline is one graph), but nothing of theirs is
scored: no split-size or coverage guard. There is nothing to decode. This module stays
light: prepare imports it.
"""
