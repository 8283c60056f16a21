"""Exact byte-level BPE training (issue 2).

pretokenize.py  documents → deduplicated {pre-token bytes: count}, in parallel worker processes
trainer.py      the exact merge rule; `train_merges_python` (reference-grade, no torch) and `train_merges_torch`
                (vectorised, any device: the --device cuda path)
native.py       the same loop in C (merge_loop.c, compiled on first use): the default CPU engine
demo.py         --demo rendering of a sample coloured by token
train.py        a whole run in one call, `train_tokenizer(...)`: settings, engine/device choice, character budget,
                pre-tokenization, exact combining across ranks, merge loop, cross-rank check, metadata, save
Every engine gives identical merges; train_tokenizer.py is the command line over train.py.
"""
