"""An independent BPE for the tests: the textbook algorithm, written plainly (slow; tiny inputs only), and what
training on a .txt file means, per docs/tokenizer.md."""
from collections import Counter

import regex

from gptlab.core.errors import UserError
from gptlab.tokenizer.format import EOT


def reference_bpe(word_counts, num_merges=None):
    """The textbook BPE of {word bytes: count}: recount every pair from scratch each step; pick by (count,
    bytes(left), bytes(right), -left, -right) (docs/tokenizer.md); replace left to right without overlap.
    (merges, counts, ranks). num_merges=None: every merge the words allow; a number beyond them: UserError."""
    vocab = [bytes([i]) for i in range(256)]
    words = [(list(w), c) for w, c in word_counts.items()]
    merges, counts = [], []
    k = 0
    while num_merges is None or k < num_merges:
        pair_counts = Counter()
        for seq, c in words:
            for i in range(len(seq) - 1):
                pair_counts[(seq[i], seq[i + 1])] += c
        if not pair_counts:
            if num_merges is None:
                break
            raise UserError(f"only {k} merges possible")
        a, b = max(pair_counts, key=lambda p: (pair_counts[p], vocab[p[0]], vocab[p[1]], -p[0], -p[1]))
        new_id = 256 + k
        for seq, _ in words:  # left to right, non-overlapping
            i = 0
            while i < len(seq) - 1:
                if seq[i] == a and seq[i + 1] == b:
                    seq[i:i + 2] = [new_id]
                i += 1
        merges.append((a, b))
        counts.append(pair_counts[(a, b)])
        vocab.append(vocab[a] + vocab[b])
        k += 1
    ranks = {}
    for i, token in enumerate(vocab):
        ranks.setdefault(token, i)  # earliest id wins for duplicate byte strings
    return merges, counts, ranks


def txt_documents(raw, samples):
    """What training on the first `samples` characters of a .txt file means, per docs/tokenizer.md: documents
    split on <|endoftext|>, invalid UTF-8 replaced with U+FFFD, the character stream cut after `samples`."""
    docs, left = [], samples
    parts = raw.split(EOT.encode())
    if parts and parts[-1] == b"":
        parts.pop()
    for part in parts:
        if left <= 0:
            break
        doc = part.decode("utf-8", "replace")[:left]
        left -= len(doc)
        docs.append(doc)
    return docs


def pretoken_table(docs, pattern):
    table = Counter()
    for doc in docs:
        for piece in regex.findall(pattern, doc):
            table[piece.encode("utf-8")] += 1
    return dict(table)
