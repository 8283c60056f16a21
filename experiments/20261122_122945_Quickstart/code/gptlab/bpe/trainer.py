"""Exact byte-level BPE merge loop: deduplicated (pre-token bytes → count) table in, ordered merges out.

The rule (the same on every backend, rank count and device):

* A word is one pre-token's UTF-8 bytes (ids 0-255); nothing merges across words. The count of a pair is the
  number of adjacent positions holding it, summed over words and weighted by how often each word occurs
  (`aaa` holds (a, a) twice).
* Each step merges the pair with the highest count. Ties go to the lexicographically greatest
  `(bytes(left), bytes(right))` (Python tuple-of-bytes order); if two distinct pairs still tie (possible only when
  two ids spell the same bytes, see below) the smaller `(left_id, right_id)` wins.
* Replacement inside a word is left to right and non-overlapping (`a a a` → `aa a`). Merge k gets id 256 + k.
* Duplicate byte strings: a later merge may spell bytes an earlier one already produced ((ab, c) then (a, bc)).
  The merge is kept (ids stay 256 + k) but `mergeable_ranks` keeps the EARLIEST id for those bytes, because
  tiktoken needs bytes → id to be a function; `duplicates` counts such merges.

Three implementations of that rule, which must give identical merges (tests check them against a slow reference
and against each other): the two below, and `native.train_merges_native`, the Python loop's algorithm in C
(merge_loop.c, compiled on first use; the default CPU engine, ~10x faster than the Python loop).

`train_merges_python` (CPU, no torch): words as lists of ids with a weight each; `pair_counts` (pair → 64-bit
Python int) and `pair_words` (pair → indices of words that held it, appended lazily, may hold stale or repeated
indices) are updated incrementally: a merge only rewrites the words listed for its pair and adjusts the counts of
the pairs around each replaced position. The argmax is a lazy max-heap of (-count, tie_key, left, right): counts
of existing pairs only ever decrease (new adjacencies always involve the new id), so an entry whose stored count
is stale is re-pushed with its current count when it reaches the top, and the first entry whose count is current
is the exact maximum. `tie_key` is a string that sorts ascending exactly when `(bytes(left), bytes(right))` sorts
descending (each byte x becomes chr(256 - x), each token ends with chr(257), so a prefix sorts after its
extensions).

`train_merges_torch` (any torch device; the `--device cuda` path, also run on CPU by the tests): all words as one
flat id tensor `ids` [N] with `word_of` [N] (word index per position) and `word_count` [W] (int64). Pair counts
live in a sorted table `table_keys` [P] (left * V + right, int64) / `table_counts` [P] (int64). One merge:
  1. argmax: `table_counts.max()` and the keys holding it (one host sync); ties broken on the host by bytes.
  2. occurrences: `occ[i] = same_word[i] & ids[i] == a & ids[i+1] == b`; for a == b the runs of consecutive
     occurrences keep only even offsets from the run start (cummax of run starts), which is exactly left-to-right
     non-overlapping replacement.
  3. deltas: pairs touching a replaced position before the merge (positions i-1, i, i+1) are subtracted with
     their word's count, pairs touching a new id after the merge are added; the table is updated with
     searchsorted + index_add for existing keys and a sort of the (few) new keys; zero rows are dropped.
  4. compaction: `ids[i] = new_id`, position i+1 removed (boolean mask), O(N) fully vectorised.
No Python loop over positions or words, one small device→host copy per merge; on a GPU each merge is a dozen
kernels over N (N = total length of the distinct words, typically a few million).
"""
import heapq
from dataclasses import dataclass, field

from gptlab.errors import UserError

_INV_BYTE = [chr(256 - x) for x in range(256)]
_TOKEN_END = chr(257)


def tie_key(token_bytes):
    """A string whose ascending order is the descending order of `token_bytes` (see module docstring)."""
    return "".join([_INV_BYTE[x] for x in token_bytes]) + _TOKEN_END


@dataclass
class MergeResult:
    merges: list  # [(left_id, right_id)], merge k made id 256 + k
    counts: list  # the pair's count when it was merged
    mergeable_ranks: dict = field(default_factory=dict)  # bytes → earliest id spelling them
    duplicates: int = 0  # merges whose bytes an earlier id already spelled


def finish_result(merges, counts):
    """MergeResult with mergeable_ranks (earliest id wins for duplicate bytes) and the duplicate count."""
    vocab = [bytes([i]) for i in range(256)]
    ranks = {b: i for i, b in enumerate(vocab)}
    duplicates = 0
    for a, b in merges:
        token = vocab[a] + vocab[b]
        vocab.append(token)
        if token in ranks:
            duplicates += 1
        else:
            ranks[token] = len(vocab) - 1
    return MergeResult(list(merges), list(counts), ranks, duplicates)


def _out_of_pairs(done, wanted):
    raise UserError(f"the text only allows {done} merges (vocabulary {256 + done}) but --vocabsize asks for "
                    f"{256 + wanted}: every pre-token is already a single token. Use more text (--samples / "
                    f"--input) or a --vocabsize of at most {256 + done}")


def check_words(word_counts):
    for word, count in word_counts.items():
        if not isinstance(word, bytes) or not isinstance(count, int) or count <= 0:
            raise ValueError("word_counts must map bytes to positive int counts")


# ---------------------------------------------------------------------------------------------- pure Python
def train_merges_python(word_counts, num_merges, progress=None, on_merge=None):
    """Exact BPE on {word bytes: count} → MergeResult. `progress(n)` is called with merges done since last call;
    `on_merge(k, merges)` after merge k (for demos)."""
    words = [list(w) for w, c in word_counts.items() if len(w) >= 2]
    weights = [c for w, c in word_counts.items() if len(w) >= 2]
    pair_counts = {}
    pair_words = {}
    for idx, word in enumerate(words):
        weight = weights[idx]
        for pair in zip(word, word[1:]):
            pair_counts[pair] = pair_counts.get(pair, 0) + weight
            lst = pair_words.get(pair)
            if lst is None:
                pair_words[pair] = [idx]
            elif lst[-1] != idx:
                lst.append(idx)
    keys = [tie_key(bytes([i])) for i in range(256)]
    heap = [(-c, keys[a] + keys[b], a, b) for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)
    merges, counts = [], []
    last_report = 0
    heappush, heappop, heapreplace = heapq.heappush, heapq.heappop, heapq.heapreplace
    for k in range(num_merges):
        # lazy max: re-push stale entries with their current (smaller) count until the top is current
        while heap:
            negc, key, a, b = heap[0]
            current = pair_counts.get((a, b), 0)
            if current == -negc:
                break
            if current > 0:
                heapreplace(heap, (-current, key, a, b))
            else:
                heappop(heap)
        if not heap:
            _out_of_pairs(k, num_merges)
        negc, key, a, b = heappop(heap)
        new_id = 256 + k
        merges.append((a, b))
        counts.append(-negc)
        keys.append(keys[a][:-1] + keys[b])  # tie_key(bytes(a) + bytes(b))
        del pair_counts[(a, b)]
        delta = {}  # pair → count change from this merge (old neighbour pairs down, pairs with new_id up)
        for idx in pair_words.pop((a, b)):
            word = words[idx]
            n = len(word)
            if n < 2 or a not in word:
                continue
            weight = weights[idx]
            out = []
            i = 0
            changed = False
            while i < n:
                if i + 1 < n and word[i] == a and word[i + 1] == b:
                    changed = True
                    if out:  # left neighbour: (prev, a) becomes (prev, new_id); prev may be this merge's new_id
                        prev = out[-1]
                        p = (prev, a)
                        delta[p] = delta.get(p, 0) - weight
                        p = (prev, new_id)
                        delta[p] = delta.get(p, 0) + weight
                    if i + 2 < n:  # right neighbour: (b, next) becomes (new_id, next)
                        nxt = word[i + 2]
                        p = (b, nxt)
                        delta[p] = delta.get(p, 0) - weight
                        p = (new_id, nxt)
                        delta[p] = delta.get(p, 0) + weight
                    out.append(new_id)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            if changed:
                words[idx] = out
                for p in zip(out, out[1:]):
                    if p[0] == new_id or p[1] == new_id:
                        lst = pair_words.get(p)
                        if lst is None:
                            pair_words[p] = [idx]
                        elif lst[-1] != idx:
                            lst.append(idx)
        for p, d in delta.items():
            if d == 0 or p == (a, b):
                continue
            total = pair_counts.get(p, 0) + d
            if total:
                pair_counts[p] = total
                if p[0] == new_id or p[1] == new_id:  # a brand-new pair: its count is final for now
                    heappush(heap, (-total, keys[p[0]] + keys[p[1]], p[0], p[1]))
            else:
                del pair_counts[p]
        if progress is not None and (k + 1 - last_report >= 64 or k + 1 == num_merges):
            progress(k + 1 - last_report)
            last_report = k + 1
        if on_merge is not None:
            on_merge(k, merges)
    return finish_result(merges, counts)


# ---------------------------------------------------------------------------------------------- torch (any device)
def train_merges_torch(word_counts, num_merges, device="cpu", progress=None, on_merge=None):
    """The same exact BPE as `train_merges_python`, vectorised with torch on `device` (see module docstring)."""
    import torch

    device = torch.device(device)
    items = [(w, c) for w, c in word_counts.items() if len(w) >= 2]
    vocab_bytes = [bytes([i]) for i in range(256)]
    stride = 256 + num_merges  # pair key = left * stride + right
    if items:
        flat = bytearray(b"".join(w for w, _ in items))
        ids = torch.frombuffer(flat, dtype=torch.uint8).to(device=device, dtype=torch.int64)
        lengths = torch.tensor([len(w) for w, _ in items], dtype=torch.int64, device=device)
        word_of = torch.repeat_interleave(torch.arange(len(items), device=device), lengths)
        word_count = torch.tensor([c for _, c in items], dtype=torch.int64, device=device)
    else:
        ids = word_of = word_count = torch.zeros(0, dtype=torch.int64, device=device)

    def pair_keys_counts(mask):
        """Keys and weights of the pairs at positions j (j, j+1) where mask[j] (mask: [N-1] bool)."""
        pos = mask.nonzero().squeeze(1)
        return ids[pos] * stride + ids[pos + 1], word_count[word_of[pos]]

    def reduce_keys(keys, weights):
        uniq, inverse = torch.unique(keys, sorted=True, return_inverse=True)
        sums = torch.zeros(len(uniq), dtype=torch.int64, device=device).index_add_(0, inverse, weights)
        return uniq, sums

    same = word_of[:-1] == word_of[1:]
    table_keys, table_counts = reduce_keys(*pair_keys_counts(same))
    merges, counts = [], []
    last_report = 0
    for k in range(num_merges):
        if len(table_keys) == 0:
            _out_of_pairs(k, num_merges)
        best = table_counts.max()
        # one host sync: the max count and every key holding it
        host = torch.cat([best.view(1), table_keys[table_counts == best]]).tolist()
        count, candidates = host[0], host[1:]
        pairs = [(key // stride, key % stride) for key in candidates]
        a, b = max(pairs, key=lambda p: (vocab_bytes[p[0]], vocab_bytes[p[1]], -p[0], -p[1]))
        new_id = 256 + k
        merges.append((a, b))
        counts.append(count)
        vocab_bytes.append(vocab_bytes[a] + vocab_bytes[b])

        occ = same & (ids[:-1] == a) & (ids[1:] == b)  # [N-1]: pair (a, b) starts at j
        if a == b:  # runs of overlapping occurrences: keep offsets 0, 2, 4, ... from each run's start
            index = torch.arange(len(occ), device=device)
            starts = occ.clone()
            starts[1:] &= ~occ[:-1]
            run_start = torch.cummax(torch.where(starts, index, torch.full_like(index, -1)), 0).values
            occ &= (index - run_start) % 2 == 0
        # pairs touching a replaced position before the merge: j-1, j, j+1 for each occurrence j
        touched = occ.clone()
        touched[1:] |= occ[:-1]
        touched[:-1] |= occ[1:]
        old_keys, old_weights = pair_keys_counts(touched & same)
        # replace: position j takes the new id, position j+1 goes
        ids = ids.clone()
        ids[:-1][occ] = new_id
        keep = torch.ones(len(ids), dtype=torch.bool, device=device)
        keep[1:] &= ~occ
        ids, word_of = ids[keep], word_of[keep]
        same = word_of[:-1] == word_of[1:]
        is_new = ids == new_id
        new_keys, new_weights = pair_keys_counts(same & (is_new[:-1] | is_new[1:]))
        delta_keys, delta = reduce_keys(torch.cat([old_keys, new_keys]), torch.cat([-old_weights, new_weights]))
        # existing keys: add in place; unseen keys (all involve new_id): insert, then keep the table sorted
        where = torch.searchsorted(table_keys, delta_keys).clamp_(max=max(len(table_keys) - 1, 0))
        found = table_keys[where] == delta_keys if len(table_keys) else torch.zeros_like(delta_keys, dtype=torch.bool)
        table_counts.index_add_(0, where[found], delta[found])
        fresh = ~found & (delta != 0)
        table_keys = torch.cat([table_keys, delta_keys[fresh]])
        table_counts = torch.cat([table_counts, delta[fresh]])
        order = torch.argsort(table_keys)
        table_keys, table_counts = table_keys[order], table_counts[order]
        nonzero = table_counts != 0
        table_keys, table_counts = table_keys[nonzero], table_counts[nonzero]
        if progress is not None and (k + 1 - last_report >= 64 or k + 1 == num_merges):
            progress(k + 1 - last_report)
            last_report = k + 1
        if on_merge is not None:
            on_merge(k, merges)
    return finish_result(merges, counts)
