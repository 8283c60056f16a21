"""The tokenizer: exact byte-level BPE training and the saved format.

format.py       the .pkl format (save, safe load → tiktoken.Encoding), split patterns, <|endoftext|>
job.py          a whole training run in one call, `train_tokenizer(...)`: settings, engine/device choice, character
                budget, pre-tokenization, exact combining across ranks, merge loop, cross-rank check, save
pretokenize.py  documents → deduplicated {pre-token bytes: count}, in parallel worker processes
merges.py       the exact merge rule; `train_merges_python` (reference-grade, no torch) and `train_merges_torch`
                (vectorised, any device: the --device cuda path)
native.py       the same loop in C (merge_loop.c, compiled on first use): the default CPU engine
demo.py         --demo rendering of a sample coloured by token
pretrained.py   GPT-2's vocab.bpe/encoder.json, a byte-level tokenizer.json, a tiktoken file (Llama 3) or hf:ORG/NAME
                → the same dict, every id unchanged (read_tokenizer_file converts them on load)
Every engine gives identical merges; train_tokenizer.py is the command line over job.py.
"""
