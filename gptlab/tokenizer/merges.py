"""Exact byte-level BPE merge loop: deduplicated (pre-token bytes → count) table in, ordered merges out.

The rule (the same on every backend, rank count and device):

* A word is one pre-token's UTF-8 bytes (ids 0-255); nothing merges across words. The count of a pair is the
  number of adjacent positions holding it, summed over words and weighted by how often each word occurs
  (`aaa` holds (a, a) twice).
* Each step merges the pair with the highest count. Ties go to the lexicographically greatest
  `(bytes(left), bytes(right))` (Python tuple-of-bytes order).
* Replacement inside a word is left to right and non-overlapping (`a a a` → `aa a`). Merge k gets id 256 + k.
* No two ids ever spell the same bytes, so that order is total and `mergeable_ranks` holds every id. Proof: a
  stretch of a word that is a whole number of tokens after some merges is tokenized exactly as that stretch would
  be as a word of its own (no merge crossed its edges, and left-to-right replacement inside it started from the
  same place). If merge k joined (x, y) over bytes u that an earlier id t = (p, q) already spells, then u alone
  was [p, q] before t's merge, hence [t] ever after, yet [x, y] just before merge k: a contradiction.
  `finish_result` checks it on every training anyway (tests/unit/test_bpe.py also checks it on random tables).

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

`train_merges_torch` (any torch device; the `--device cuda` path, also run on CPU by the tests). Built so that a
merge is one small device->host copy and otherwise fixed-shape kernels whose sizes the host already knows:
* Positions: all words in one flat id tensor `ids` [N + 1]; each word is a linked list (`nxt`/`prv`), so a merge
  unlinks a position instead of compacting the tensor; `pk[i]` is the key (left * S + right, S = 256 +
  num_merges, < 2**62) of the pair starting at i (-1 if none) and `wt[i]` its word's count. Index N is a sink:
  "no neighbour" points there, it weighs 0 and holds no pair, so padded entries need no masks.
* Pair table rows: a main part sorted by key (found by searchsorted) and K dense blocks, one per upcoming new id
  (a pair is born in the merge that makes its larger id, so its row follows from its key: no insertion or re-sort
  per merge). Each row holds the weighted count and the number of positions. Every K merges the non-zero rows are
  folded into the main part (one sort, one sync).
* Occurrence index: positions sorted by pair key when built, plus a log of positions whose pair changed since.
One merge:
  1. argmax: max count, the first 64 rows holding it (nonzero_static), among them the greatest
     (rank[left], rank[right]) (rank: place of a token's bytes among all token byte strings, kept by bisect on the
     host and shifted on the device), then the smallest key. One `.tolist()` brings count, key, the number n of
     positions holding the pair, its range in the occurrence index, the inactive-position count and the number of
     tied rows (more than 64: a second sync decides among all of them; rare on real text).
  2. occurrences: the pair's index range + the log, checked against `pk` and de-duplicated; or, when those
     candidates are many, a scan `pk == key`; either way nonzero_static(size=n). For a == b, chains of
     overlapping occurrences keep offsets 0, 2, 4, ... (cummax), i.e. left-to-right non-overlapping.
  3. rewrite: j takes the new id, r = nxt[j] dies, links skip r; the pairs at l = prv[j] and r go, pairs at j and
     its new left neighbour come, each position counted once (`mark` stamps the replaced j's).
  4. counts: one index_add (weights and position counts) into the rows of the touched pairs; (a, b) is zeroed.
  5. housekeeping, decided on the host: when an eighth of the positions hold no pair (dead, or their word is one
     token) they are dropped and the index is rebuilt; the index is also rebuilt when the log grows (a sort).
Per merge the work is O(occurrences + log) plus a few passes over the pair table; a pass over all N positions
only when the candidates outnumber N / 8 (the first merges). Syncs: step 1, and the occasional fold, compaction
or rebuild.
"""
import bisect
import heapq
from dataclasses import dataclass, field

from gptlab.core.errors import UserError

_INV_BYTE = [chr(256 - x) for x in range(256)]
_TOKEN_END = chr(257)


def tie_key(token_bytes):
    """A string whose ascending order is the descending order of `token_bytes` (see module docstring)."""
    return "".join([_INV_BYTE[x] for x in token_bytes]) + _TOKEN_END


@dataclass
class MergeResult:
    merges: list  # [(left_id, right_id)], merge k made id 256 + k
    counts: list  # the pair's count when it was merged
    mergeable_ranks: dict = field(default_factory=dict)  # bytes → id, all 256 + len(merges) of them


def finish_result(merges, counts):
    """MergeResult with mergeable_ranks; a merge that spells an existing token's bytes means a broken engine."""
    vocab = [bytes([i]) for i in range(256)]
    ranks = {b: i for i, b in enumerate(vocab)}
    for k, (a, b) in enumerate(merges):
        token = vocab[a] + vocab[b]
        if token in ranks:
            raise RuntimeError(f"merge {k} ({a}, {b}) spells {token!r}, which id {ranks[token]} already spells; exact "
                               "BPE never does this (see gptlab/tokenizer/merges.py), so the merge loop is wrong: please "
                               "report it with the input text")
        ranks[token] = len(vocab)
        vocab.append(token)
    return MergeResult(list(merges), list(counts), ranks)


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
_NONZERO_STATIC_WORKS = {}  # device type → whether torch.nonzero_static runs there


def nonzero_static(mask, size, fill_value):
    """Indices (size, 1) of the first `size` True entries of a 1-D mask, padded with fill_value, without a host
    sync. Where this torch build has no nonzero_static for the device, the same result via nonzero (one sync)."""
    import torch  # heavy (~1 s): only the torch engine; CPU runs never import torch

    kind = mask.device.type
    if _NONZERO_STATIC_WORKS.get(kind, True):
        try:
            out = torch.nonzero_static(mask, size=size, fill_value=fill_value)
            _NONZERO_STATIC_WORKS[kind] = True
            return out
        except torch.OutOfMemoryError:
            raise  # not a missing kernel: do not fall back to the syncing path for good
        except (NotImplementedError, RuntimeError):
            _NONZERO_STATIC_WORKS[kind] = False
    found = mask.nonzero()[:size]
    pad = torch.full((size - len(found), 1), fill_value, dtype=found.dtype, device=found.device)
    return torch.cat([found, pad])


def train_merges_torch(word_counts, num_merges, device="cpu", progress=None, on_merge=None):
    """The same exact BPE as `train_merges_python`, vectorised with torch on `device` (see module docstring)."""
    import torch  # heavy (~1 s): only the torch engine; CPU runs never import torch

    device = torch.device(device)
    i64 = dict(dtype=torch.int64, device=device)
    items = [(w, c) for w, c in word_counts.items() if len(w) >= 2]
    vocab_bytes = [bytes([i]) for i in range(256)]
    S = 256 + num_merges  # every id is < S; pair key = left * S + right (< 2**62 for any supported vocab)
    DEAD = NO_PAIR = -1
    BIG = torch.iinfo(torch.int64).max
    TIES = 64  # rows holding the max count that the tie-break looks at without a second sync

    # ---- positions: all words in one flat tensor, each word a linked list; index N is the sink (see docstring)
    if items:
        flat = bytearray(b"".join(w for w, _ in items))
        ids = torch.frombuffer(flat, dtype=torch.uint8).to(**i64)
        lengths = torch.tensor([len(w) for w, _ in items], **i64)
        wt = torch.repeat_interleave(torch.tensor([c for _, c in items], **i64), lengths)
    else:
        ids = wt = lengths = torch.zeros(0, **i64)
    N = len(ids)
    pos = torch.arange(N, **i64)
    ends = torch.cumsum(lengths, 0)
    is_last = torch.zeros(N, dtype=torch.bool, device=device).index_fill_(0, ends - 1, True)
    is_first = torch.zeros(N, dtype=torch.bool, device=device).index_fill_(0, ends - lengths, True)
    # the sink's entry; a fill: torch.tensor([v], device=cuda) would be a blocking host copy
    one = lambda v: torch.full((1,), v, **i64)  # noqa: E731
    ids = torch.cat([ids, one(DEAD)])
    wt = torch.cat([wt, one(0)])  # word count per position; the sink weighs 0
    nxt = torch.cat([torch.where(is_last, N, pos + 1), one(N)])  # next live position of the word, N if none
    prv = torch.cat([torch.where(is_first, N, pos - 1), one(N)])  # previous live position of the word, N if none
    pk = torch.where(nxt != N, ids * S + ids[nxt], NO_PAIR)  # key of the pair starting at each position
    mark = torch.full((N + 1,), -1, **i64)  # mark[j] == k: merge k replaced a pair starting at j
    inactive = torch.zeros((), **i64)  # positions dead or alone in their word, since the last compaction
    stamp = torch.zeros(N + 1, **i64)  # scratch for de-duplicating candidate positions

    # ---- occurrence index: positions sorted by pair key when it was built, plus a log of the positions whose
    #      pair changed since then; a pair's positions are among its sorted range and the log
    def build_index():
        live = (pk[:N] >= 0).nonzero().squeeze(1)
        keys_sorted, order = torch.sort(pk[live])
        return live[order], keys_sorted

    index_pos, index_keys = build_index()
    log = torch.zeros(max(1024, N // 4), **i64)
    log_len = 0

    # ---- initial pairs are byte pairs: dense 256 x 256 sums (weighted count, number of positions), non-zero rows
    valid = pk[:N] >= 0
    dense_at = torch.where(valid, ids[:N] * 256 + ids[nxt[:N]], 0)
    dense = torch.zeros(2, 256 * 256, **i64)
    dense[0].index_add_(0, dense_at, torch.where(valid, wt[:N], 0))
    dense[1].index_add_(0, dense_at, valid.long())
    nz = dense[0].nonzero().squeeze(1)
    main = ((nz // 256) * S + nz % 256, dense[0, nz], dense[1, nz])  # keys ascending, counts, positions

    # ---- tie-break ranks: rank[i] = place of bytes(i) among the token byte strings, sorted
    rank = torch.zeros(S, **i64)
    rank[:256] = torch.arange(256, **i64)
    sorted_tokens = list(vocab_bytes)

    def build_table(keys, counts, npos, base):
        """Pair table rows = [main: `keys` ascending, P rows | K dense blocks for ids base .. base+K-1 | dump].
        The block of id m has width 2h (h = base + K > every id it can meet): row x holds (x, m), row h + y
        holds (m, y). A pair is born in the merge that makes its larger id, so its row follows from its key."""
        P = len(keys)
        K = max(1, min(64, num_merges - (base - 256), max(8, P // (4 * base))))  # blocks ≈ P/2 rows
        h = base + K
        row = torch.arange(2 * h, **i64)
        m = torch.arange(base, base + K, **i64).unsqueeze(1)
        left = torch.cat([keys // S, torch.where(row < h, row, m).reshape(-1), one(0)])
        right = torch.cat([keys % S, torch.where(row < h, m, row - h).reshape(-1), one(0)])
        cnt = torch.zeros(2, P + 2 * h * K + 1, **i64)  # [0]: weighted count, [1]: number of positions
        cnt[0, :P], cnt[1, :P] = counts, npos
        return dict(cnt=cnt, left=left, right=right, keys=left * S + right, P=P, K=K, h=h, base=base)

    def pick(tab, best, rows):
        """The winning row (1-element tensor) among table `rows` (padded rows hold another count)."""
        tie = rank[tab["left"][rows]] * S + rank[tab["right"][rows]]
        tie = torch.where(tab["cnt"][0, rows] == best, tie, -1)
        best_row = torch.where(tie == tie.max(), tab["keys"][rows], BIG).argmin().view(1)  # 1-D: no .item()
        return rows[best_row]

    def fetch(tab, at, best, inactive, n_tied):
        """One device->host copy: count, key, positions holding it, its index range, inactive, n_tied."""
        key_t = tab["keys"][at]
        span = [torch.searchsorted(index_keys, key_t, right=side) for side in (False, True)]
        return torch.cat([best.view(1), key_t, tab["cnt"][1, at], *span, inactive.view(1), n_tied.view(1)]).tolist()

    tab = build_table(*main, 256)
    merges, counts = [], []
    last_report = 0
    for k in range(num_merges):
        new_id = 256 + k
        if new_id == tab["base"] + tab["K"]:  # blocks full: fold their non-zero rows into the main part (1 sync)
            live = tab["cnt"][0, :-1].nonzero().squeeze(1)
            keys, (cnt, npos) = tab["keys"][live], tab["cnt"][:, live]
            order = torch.argsort(keys)
            tab = build_table(keys[order], cnt[order], npos[order], new_id)
        cnt, P, h, base = tab["cnt"], tab["P"], tab["h"], tab["base"]
        dump = cnt.shape[1] - 1  # rows for "no pair" land here and are zeroed again

        # 1. argmax with exact ties, fixed-shape: the rows holding the highest count (the first TIES of them);
        #    among those the greatest (rank[left], rank[right]) = greatest (bytes(left), bytes(right)); then the
        #    smallest key. The merge's one device->host copy: count, key, number of positions holding the pair,
        #    its range in the occurrence index, inactive positions, number of tied rows.
        best = cnt[0].max()
        is_best = cnt[0] == best
        at = pick(tab, best, nonzero_static(is_best, TIES, dump).squeeze(1))
        count, key, n_occ, lo, hi, n_inactive, n_tied = fetch(tab, at, best, inactive, is_best.sum())
        if n_tied > TIES:  # rare: more ties than candidates, decide among all of them (a second sync)
            at = pick(tab, best, is_best.nonzero().squeeze(1))
            count, key, n_occ, lo, hi, n_inactive, n_tied = fetch(tab, at, best, inactive, is_best.sum())
        if count <= 0:
            _out_of_pairs(k, num_merges)
        a, b = divmod(key, S)
        merges.append((a, b))
        counts.append(count)
        token = vocab_bytes[a] + vocab_bytes[b]
        vocab_bytes.append(token)

        # 2. occurrences: the n_occ positions whose pair is (a, b), ascending; sizes known on the host, so no sync.
        #    Candidates are the pair's range of the index and the log (may be stale or repeated: checked against pk
        #    and de-duplicated with `stamp`); when they are many, a plain scan of pk is cheaper
        n_cand = hi - lo + log_len
        if n_cand * 8 < N:
            cand = torch.cat([index_pos[lo:hi], log[:log_len]])
            order = torch.arange(n_cand, **i64)
            stamp.scatter_(0, cand, order)  # one of the copies of each position wins
            found = (pk[cand] == key) & (stamp[cand] == order)
            j = cand[nonzero_static(found, n_occ, 0).squeeze(1)].sort().values
        else:
            j = nonzero_static(pk[:N] == key, n_occ, N).squeeze(1)
        if a == b:  # chains j -> nxt[j] of overlapping occurrences: keep offsets 0, 2, 4, ... of each chain
            idx = torch.arange(n_occ, **i64)
            chained = torch.zeros(n_occ, dtype=torch.bool, device=device)
            chained[1:] = nxt[j[:-1]] == j[1:]
            offset = idx - torch.cummax(torch.where(chained, -1, idx), 0).values
            j = torch.where(offset % 2 == 0, j, N)  # dropped ones become the sink (they are some kept j's r)
        keep = j != N

        # 3. rewrite x a b y -> x new y: j takes new_id, r = nxt[j] dies, the links skip it
        r, l, w = nxt[j], prv[j], wt[j]  # noqa: E741
        rr = nxt[r]
        mark.index_fill_(0, j, k)
        mark[N:].fill_(-1)  # the sink is never a replaced position (slice fills: t[N] = v would sync on CUDA)
        l = torch.where(mark[prv[l]] == k, N, l)  # noqa: E741  l is the previous j's r (a b a b): counted there
        old_left = ids[l]  # pairs that go: (ids[l], a) at l, (a, b) at j (zeroed below), (b, ids[rr]) at r
        old_right = ids[rr]
        ids.index_fill_(0, j, new_id)
        ids.index_fill_(0, r, DEAD)
        ids[N:].fill_(DEAD)
        nxt.scatter_(0, j, rr)
        prv.scatter_(0, rr, j)
        for t in (nxt, prv):
            t.index_fill_(0, r, N)
            t[N:].fill_(N)  # rr == N wrote into the sink
        pk.index_fill_(0, r, NO_PAIR)
        # pairs that come: (new, ids[rr]) at j, (ids[lp], new) at lp = the new left neighbour of j, unless lp is
        # itself a replaced j (then that pair is (new, new), already counted at lp)
        lp = prv[j]
        lp_ok = (lp != N) & (mark[lp] != k)
        new_right = ids[rr]
        new_left = ids[lp]
        pk.scatter_(0, j, torch.where(rr != N, new_id * S + new_right, NO_PAIR))
        pk.scatter_(0, torch.where(lp_ok, lp, N), torch.where(lp_ok, new_left * S + new_id, NO_PAIR))
        inactive += keep.sum() + (keep & (lp == N) & (rr == N)).sum()  # dead r's, words now a single token
        if log_len + 2 * n_occ > len(log):
            log = torch.cat([log[:log_len], torch.zeros(max(len(log), 2 * n_occ), **i64)])
        log[log_len:log_len + 2 * n_occ] = torch.cat([j, lp])  # the positions whose pk may have changed
        log_len += 2 * n_occ

        # 4. counts: index_add into the rows of the touched pairs; a pair's row is in its larger id's block,
        #    else found by searchsorted in the main part
        x = torch.cat([old_left, torch.full_like(r, b), torch.full_like(j, new_id), new_left])
        y = torch.cat([torch.full_like(l, a), old_right, new_right, torch.full_like(lp, new_id)])
        ok = torch.cat([l != N, rr != N, rr != N, lp_ok])
        sign = torch.cat([-w, -w, w, w])
        m = torch.maximum(x, y)
        in_block = P + (m - base) * (2 * h) + torch.where(y == m, x, h + y)
        in_main = torch.searchsorted(tab["keys"][:P], x * S + y)
        row = torch.where(ok, torch.where(m >= base, in_block, in_main), dump)
        cnt.index_add_(1, row, torch.stack([sign, sign.sign()]))
        cnt[:, dump] = 0
        cnt.index_fill_(1, at, 0)  # (a, b) is gone: every occurrence was replaced or was the r of one (a == b)

        # 5. housekeeping, host-side decisions only: drop positions that hold no pair when an eighth of them are
        #    (dead or alone in their word; 1 sync), rebuild the index when the log is long (1 sync)
        if n_inactive * 8 >= N:
            keep_pos = ((pk[:N] >= 0) | (prv[:N] != N)).nonzero().squeeze(1)
            N = len(keep_pos)
            remap = torch.full((len(ids),), N, **i64)
            remap[keep_pos] = torch.arange(N, **i64)
            ids, wt, pk = (torch.cat([t[keep_pos], t[-1:]]) for t in (ids, wt, pk))
            nxt, prv = (torch.cat([remap[t[keep_pos]], one(N)]) for t in (nxt, prv))
            mark = torch.full((N + 1,), -1, **i64)
            stamp = torch.zeros(N + 1, **i64)
            inactive = torch.zeros((), **i64)
            log_len = N  # forces the rebuild below
        if log_len * 16 > N:
            index_pos, index_keys = build_index()
            log_len = 0

        # 6. ranks: insert the new token's bytes (never equal to an existing token's, see the module docstring)
        place = bisect.bisect_left(sorted_tokens, token)
        sorted_tokens.insert(place, token)
        rank += rank >= place
        rank[new_id:new_id + 1].fill_(place)

        if progress is not None and (k + 1 - last_report >= 64 or k + 1 == num_merges):
            progress(k + 1 - last_report)
            last_report = k + 1
        if on_merge is not None:
            on_merge(k, merges)
    return finish_result(merges, counts)
