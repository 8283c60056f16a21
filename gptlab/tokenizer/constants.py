"""Facts every tokenizer module shares (format.py re-exports them; pretrained.py reads them without importing
format.py, which imports it)."""
EOT = "<|endoftext|>"
MAX_TOKENIZER_BYTES = 256 * 2**20  # a vocabulary of 2**20 tokens takes ~40 MB; larger files are refused unread
