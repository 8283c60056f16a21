# ===== train_tokenizer.py =====
"""Train an exact byte-level BPE tokenizer → tokenizers/{name}_v{vocabsize}_n{samples}.pkl (+ .merges.txt).

    python   train_tokenizer.py --samples 100000 --vocabsize 1000 --name readmetokenizer --demo
    python   train_tokenizer.py --input data/sample/fineweb_edu_150docs.jsonl --samples 500000 --vocabsize 2048
    torchrun --nproc_per_node=G train_tokenizer.py --samples 1000000000 --vocabsize 65534 --name gpt4regex

--samples counts characters of text: with --input, the first --samples characters of the files, whatever the
world size; streamed from the Hub, --samples / world_size per rank. --vocabsize counts the 256 bytes plus the
merges (the one special token, <|endoftext|>, gets id vocabsize). Every rank pre-tokenizes its own share of the
documents with --workers processes, the deduplicated (pre-token → count) tables are combined exactly, and the
merge loop (gptlab/bpe/trainer.py) gives the same merges on CPU, GPU and any number of ranks.
The work is gptlab/bpe/train.py's train_tokenizer(); this file only reads the flags and reports.
"""
import argparse
import os
import time

from gptlab.bpe.train import DATASET_CONFIG
from gptlab.errors import UserError, run_cli


def parse_args(argv=None):
    from gptlab.text_sources import HUB_DATASETS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--samples", type=int, default=10_000_000, help="characters of text to train on (all ranks)")
    ap.add_argument("--vocabsize", type=int, default=8192, help="256 bytes + merges, excluding <|endoftext|>")
    ap.add_argument("--name", default="tokenizer", help="file name prefix")
    ap.add_argument("--input", nargs="+", metavar="PATH", help="local .txt/.jsonl/.parquet files or globs; "
                    "without it FineWeb(-Edu) is streamed from the HuggingFace Hub")
    ap.add_argument("--dataset", choices=sorted(HUB_DATASETS), default="fineweb",
                    help=f"Hub dataset when no --input is given (config {DATASET_CONFIG})")
    ap.add_argument("--seed", type=int, default=0, help="shuffle seed of the streamed dataset")
    ap.add_argument("--pattern", default="gpt4", help="pre-tokenization regex: gpt4, gpt2 or a regex")
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda (where the merge loop runs)")
    ap.add_argument("--engine", choices=["auto", "native", "python", "torch"], default="auto",
                    help="merge loop: auto = native (C, built on first use) or else python on CPU, torch on "
                         "CUDA; all give identical merges (torch on CPU is for testing)")
    ap.add_argument("--workers", type=int, default=None,
                    help="pre-tokenization processes per rank (default: this rank's share of the cores)")
    ap.add_argument("--out", default="tokenizers", help="output folder")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing tokenizer file")
    ap.add_argument("--demo", action="store_true", help="print a sample coloured by token during training")
    return ap.parse_args(argv)


def main(argv=None):
    from gptlab.bpe.train import train_tokenizer
    from gptlab.tokenizer import EOT, tokenizer_filename

    t0 = time.time()
    args = parse_args(argv)
    if "/" in args.name or not args.name.strip():
        raise UserError(f"--name {args.name!r} must be a plain file name prefix (no '/')")
    out_path = os.path.join(args.out, tokenizer_filename(args.name, args.vocabsize, args.samples))
    trained = train_tokenizer(inputs=args.input, dataset=args.dataset, seed=args.seed, samples=args.samples,
                              vocabsize=args.vocabsize, pattern=args.pattern, device=args.device, engine=args.engine,
                              workers=args.workers, demo=args.demo, out_path=out_path, overwrite=args.overwrite)
    if trained.is_main:
        meta = trained.metadata
        dup = f", {meta['duplicates']} duplicate byte strings" if meta["duplicates"] else ""
        print(f"wrote {out_path} ({args.vocabsize} tokens + {EOT}, {meta['chars_used']:,} characters, "
              f"{meta['docs']:,} documents{dup}) in {time.time() - t0:.1f}s", flush=True)
    return out_path


if __name__ == "__main__":
    run_cli(main)

# ===== gptlab/bpe/__init__.py =====
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

# ===== gptlab/bpe/demo.py =====
"""--demo: show a sample text coloured by token (ANSI background colours) while the merges are learned."""

# 256-colour background codes that keep black text readable
_COLOURS = [153, 194, 224, 230, 189, 159, 217, 187, 225, 158]


def encode_with_merges(text, pattern, merges):
    """Token byte strings of `text` under the merges learned so far, encoded as the saved tokenizer would be:
    a tiktoken Encoding of their ranks (the earliest id wins for duplicate byte strings, as in the trainer)."""
    from gptlab.bpe.trainer import finish_result
    from gptlab.tokenizer import encoding_from_dict

    ranks = finish_result(merges, counts=[]).mergeable_ranks
    encoding = encoding_from_dict({"pat_str": pattern, "mergeable_ranks": ranks, "special_tokens": {}},
                                  name=f"demo_{len(merges)}")
    return [encoding.decode_single_token_bytes(token) for token in encoding.encode_ordinary(text)]


def render(text, pattern, merges):
    """The sample with each token on its own background colour, plus a token count line."""
    tokens = encode_with_merges(text, pattern, merges)
    parts, pending, colour = [], b"", 0
    for token in tokens:
        pending += token
        try:  # a token may end inside a UTF-8 character: colour it together with the next one(s)
            shown = pending.decode("utf-8")
        except UnicodeDecodeError:
            if len(pending) < 4:
                continue
            shown = pending.decode("utf-8", errors="replace")
        pending = b""
        shown = shown.replace("\n", "\\n\n")
        parts.append(f"\x1b[48;5;{_COLOURS[colour % len(_COLOURS)]}m\x1b[30m{shown}\x1b[0m")
        colour += 1
    if pending:
        parts.append(pending.decode("utf-8", errors="replace"))
    n_bytes = len(text.encode("utf-8"))
    ratio = n_bytes / max(1, len(tokens))
    return (f"--- after {len(merges)} merges: {len(tokens)} tokens for {n_bytes} bytes "
            f"({ratio:.2f} bytes/token) ---\n" + "".join(parts) + "\n")

# ===== gptlab/bpe/merge_loop.c =====
/* The exact BPE merge loop of gptlab/bpe/trainer.py (train_merges_python), in C for speed.
 *
 * Same rule, same data structures, same results (tests compare them on every corpus):
 *   words      flat int32 ids, word w at [start[w], start[w] + len[w]), rewritten in place (merges only shrink)
 *   pairs      open-addressing hash table (key = left << 32 | right) → slot: 64-bit count + list of words that
 *              held the pair (appended lazily; stale or repeated entries are skipped when the pair is merged)
 *   heap       lazy max-heap of (count, slot): counts of existing pairs only decrease, so a stale top entry is
 *              re-pushed with its current count; ties → greatest (bytes(left), bytes(right)), then smallest ids.
 * Built at run time by gptlab/bpe/native.py (cc -O2 -shared); without a C compiler the Python loop is used.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int64_t key; int64_t count; int32_t *words; int32_t n_words, cap_words, last_step; } Slot;
typedef struct { int64_t count; int32_t slot; } Entry;

static Slot *slots; static int64_t n_slots, cap_slots;       /* slot storage (never deleted)          */
static int32_t *table; static int64_t table_mask;           /* hash → slot index + 1 (0 = empty)      */
static Entry *heap; static int64_t heap_len, heap_cap;
static uint8_t *tok_bytes; static int64_t tok_bytes_len, tok_bytes_cap;
static int64_t *tok_off; static int32_t *tok_len;           /* token id → its bytes                   */

static uint64_t hash64(uint64_t x) { x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; return x; }

static int grow_table(void) {
    int64_t new_size = (table_mask + 1) * 2;
    int32_t *t = calloc(new_size, sizeof(int32_t));
    if (!t) return -1;
    for (int64_t s = 0; s < n_slots; s++) {
        uint64_t h = hash64(slots[s].key) & (new_size - 1);
        while (t[h]) h = (h + 1) & (new_size - 1);
        t[h] = (int32_t)(s + 1);
    }
    free(table); table = t; table_mask = new_size - 1;
    return 0;
}

/* slot of pair (a, b), created with count 0 when absent; -1 on out of memory */
static int64_t slot_of(int32_t a, int32_t b) {
    int64_t key = ((int64_t)a << 32) | (uint32_t)b;
    uint64_t h = hash64(key) & table_mask;
    while (table[h]) {
        if (slots[table[h] - 1].key == key) return table[h] - 1;
        h = (h + 1) & table_mask;
    }
    if (n_slots == cap_slots) {
        int64_t cap = cap_slots * 2;
        Slot *s = realloc(slots, cap * sizeof(Slot));
        if (!s) return -1;
        slots = s; cap_slots = cap;
    }
    Slot *s = &slots[n_slots];
    s->key = key; s->count = 0; s->words = NULL; s->n_words = 0; s->cap_words = 0; s->last_step = -1;
    table[h] = (int32_t)(n_slots + 1);
    n_slots++;
    if (n_slots * 2 > table_mask + 1 && grow_table()) return -1;
    return n_slots - 1;
}

static int add_word(Slot *s, int32_t w) {
    if (s->n_words && s->words[s->n_words - 1] == w) return 0;
    if (s->n_words == s->cap_words) {
        int32_t cap = s->cap_words ? s->cap_words * 2 : 2;
        int32_t *p = realloc(s->words, (size_t)cap * sizeof(int32_t));
        if (!p) return -1;
        s->words = p; s->cap_words = cap;
    }
    s->words[s->n_words++] = w;
    return 0;
}

/* >0 when pair slot x ranks above y: larger count, then greater (bytes(left), bytes(right)), then smaller ids */
static int cmp_tokens(int32_t x, int32_t y) {
    int32_t lx = tok_len[x], ly = tok_len[y];
    int c = memcmp(tok_bytes + tok_off[x], tok_bytes + tok_off[y], lx < ly ? lx : ly);
    if (c) return c;
    return (lx > ly) - (lx < ly);
}
static int above(Entry x, Entry y) {
    if (x.count != y.count) return x.count > y.count;
    int64_t kx = slots[x.slot].key, ky = slots[y.slot].key;
    int32_t ax = (int32_t)(kx >> 32), bx = (int32_t)(kx & 0xffffffff);
    int32_t ay = (int32_t)(ky >> 32), by = (int32_t)(ky & 0xffffffff);
    int c = cmp_tokens(ax, ay);
    if (!c) c = cmp_tokens(bx, by);
    if (c) return c > 0;
    return kx < ky;
}

static int heap_push(int64_t count, int32_t slot) {
    if (heap_len == heap_cap) {
        int64_t cap = heap_cap * 2;
        Entry *h = realloc(heap, cap * sizeof(Entry));
        if (!h) return -1;
        heap = h; heap_cap = cap;
    }
    Entry e = {count, slot};
    int64_t i = heap_len++;
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (!above(e, heap[parent])) break;
        heap[i] = heap[parent]; i = parent;
    }
    heap[i] = e;
    return 0;
}

static void heap_sift_down(int64_t i) {
    Entry e = heap[i];
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= heap_len) break;
        if (child + 1 < heap_len && above(heap[child + 1], heap[child])) child++;
        if (!above(heap[child], e)) break;
        heap[i] = heap[child]; i = child;
    }
    heap[i] = e;
}

static void heap_pop(void) {
    heap[0] = heap[--heap_len];
    if (heap_len) heap_sift_down(0);
}

static void free_all(void) {
    for (int64_t s = 0; s < n_slots; s++) free(slots[s].words);
    free(slots); free(table); free(heap); free(tok_bytes); free(tok_off); free(tok_len);
    slots = NULL; table = NULL; heap = NULL; tok_bytes = NULL; tok_off = NULL; tok_len = NULL;
}

typedef int (*progress_fn)(int32_t merges_done);

/* Returns merges done (< num_merges when pairs ran out), -1 on out of memory, -2 when progress asked to stop.
 * ids: flat word ids (modified), start/len: per word, weight: per word count.
 * out_pairs[2k], out_pairs[2k+1]: merge k; out_counts[k]: its count. progress(k) every `report_every` merges. */
int64_t bpe_train(int32_t *ids, const int64_t *start, int32_t *len, const int64_t *weight, int64_t n_words,
                  int32_t num_merges, int32_t *out_pairs, int64_t *out_counts, progress_fn progress,
                  int32_t report_every) {
    int64_t result = -1, done = 0;
    int32_t *touched = NULL; int64_t n_touched = 0, cap_touched = 1024;
    n_slots = 0; cap_slots = 1 << 16; heap_len = 0; heap_cap = 1 << 16;
    table_mask = (1 << 17) - 1;
    slots = malloc(cap_slots * sizeof(Slot)); table = calloc(table_mask + 1, sizeof(int32_t));
    heap = malloc(heap_cap * sizeof(Entry)); touched = malloc(cap_touched * sizeof(int32_t));
    int32_t n_tokens = 256 + num_merges;
    tok_off = malloc(n_tokens * sizeof(int64_t)); tok_len = malloc(n_tokens * sizeof(int32_t));
    tok_bytes_cap = 1 << 16; tok_bytes = malloc(tok_bytes_cap);
    if (!slots || !table || !heap || !touched || !tok_off || !tok_len || !tok_bytes) goto out;
    for (int i = 0; i < 256; i++) { tok_bytes[i] = (uint8_t)i; tok_off[i] = i; tok_len[i] = 1; }
    tok_bytes_len = 256;

    for (int64_t w = 0; w < n_words; w++) {
        int32_t *word = ids + start[w];
        for (int32_t i = 0; i + 1 < len[w]; i++) {
            int64_t s = slot_of(word[i], word[i + 1]);
            if (s < 0 || add_word(&slots[s], (int32_t)w)) goto out;
            slots[s].count += weight[w];
        }
    }
    for (int64_t s = 0; s < n_slots; s++)
        if (heap_push(slots[s].count, (int32_t)s)) goto out;

    for (done = 0; done < num_merges; done++) {
        /* lazy max: re-push stale entries until the top holds a current count */
        while (heap_len) {
            Entry top = heap[0];
            int64_t current = slots[top.slot].count;
            if (current == top.count) break;
            if (current > 0) { heap[0].count = current; heap_sift_down(0); }
            else heap_pop();
        }
        if (!heap_len) break;
        Entry best = heap[0];
        heap_pop();
        int32_t best_slot = best.slot;
        int32_t a = (int32_t)(slots[best_slot].key >> 32), b = (int32_t)(slots[best_slot].key & 0xffffffff);
        int32_t new_id = 256 + (int32_t)done;
        out_pairs[2 * done] = a; out_pairs[2 * done + 1] = b; out_counts[done] = best.count;
        /* the new token's bytes */
        int32_t nl = tok_len[a] + tok_len[b];
        if (tok_bytes_len + nl > tok_bytes_cap) {
            int64_t cap = (tok_bytes_len + nl) * 2;
            uint8_t *p = realloc(tok_bytes, cap);
            if (!p) goto out;
            tok_bytes = p; tok_bytes_cap = cap;
        }
        memcpy(tok_bytes + tok_bytes_len, tok_bytes + tok_off[a], tok_len[a]);
        memcpy(tok_bytes + tok_bytes_len + tok_len[a], tok_bytes + tok_off[b], tok_len[b]);
        tok_off[new_id] = tok_bytes_len; tok_len[new_id] = nl; tok_bytes_len += nl;

        int32_t *word_list = slots[best_slot].words; int32_t n_list = slots[best_slot].n_words;
        slots[best_slot].words = NULL; slots[best_slot].n_words = slots[best_slot].cap_words = 0;
        n_touched = 0;
        for (int32_t li = 0; li < n_list; li++) {
            int32_t w = word_list[li];
            int32_t *word = ids + start[w];
            int32_t n = len[w], out_n = 0, i = 0;
            int64_t wt = weight[w];
            int changed = 0;
            while (i < n) {
                if (i + 1 < n && word[i] == a && word[i + 1] == b) {
                    changed = 1;
                    if (out_n) { /* left neighbour: (prev, a) → (prev, new_id) */
                        int32_t prev = word[out_n - 1];
                        int64_t s = slot_of(prev, a);
                        if (s < 0) goto out;
                        slots[s].count -= wt;
                        s = slot_of(prev, new_id);
                        if (s < 0) goto out;
                        slots[s].count += wt;
                    }
                    if (i + 2 < n) { /* right neighbour: (b, next) → (new_id, next) */
                        int32_t next = word[i + 2];
                        int64_t s = slot_of(b, next);
                        if (s < 0) goto out;
                        slots[s].count -= wt;
                        s = slot_of(new_id, next);
                        if (s < 0) goto out;
                        slots[s].count += wt;
                    }
                    word[out_n++] = new_id;
                    i += 2;
                } else {
                    word[out_n++] = word[i++];
                }
            }
            if (!changed) continue;
            len[w] = out_n;
            for (int32_t j = 0; j + 1 < out_n; j++) {
                if (word[j] != new_id && word[j + 1] != new_id) continue;
                int64_t s = slot_of(word[j], word[j + 1]);
                if (s < 0 || add_word(&slots[s], w)) goto out;
                if (slots[s].last_step != (int32_t)done) {
                    slots[s].last_step = (int32_t)done;
                    if (n_touched == cap_touched) {
                        int32_t *p = realloc(touched, 2 * cap_touched * sizeof(int32_t));
                        if (!p) goto out;
                        touched = p; cap_touched *= 2;
                    }
                    touched[n_touched++] = (int32_t)s;
                }
            }
        }
        free(word_list);
        slots[best_slot].count = 0;
        for (int64_t t = 0; t < n_touched; t++)  /* brand-new pairs enter the heap with their final count */
            if (slots[touched[t]].count > 0 && heap_push(slots[touched[t]].count, touched[t])) goto out;
        if (progress && (done + 1) % report_every == 0 && progress((int32_t)(done + 1))) { result = -2; goto out; }
    }
    result = done;
out:
    free(touched);
    free_all();
    return result;
}

# ===== gptlab/bpe/native.py =====
"""The C merge loop (merge_loop.c): compiled on first use with the system C compiler, loaded with ctypes.

It implements exactly `trainer.train_merges_python` (tests compare the two on every corpus) and is the default
CPU engine when a compiler is available; otherwise `available()` is False and the Python loop runs instead.
The shared library is cached per source hash in $GPTLAB_CACHE (default ~/.cache/gptlab).
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

from gptlab.errors import UserError

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "merge_loop.c")
_lib = None
_error = None
_PROGRESS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32)


def _cache_dir():
    default = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "gptlab")
    return os.environ.get("GPTLAB_CACHE", default)


def _build():
    with open(_SOURCE, "rb") as f:
        source = f.read()
    digest = hashlib.sha256(source + sys.version.encode()).hexdigest()[:16]
    path = os.path.join(_cache_dir(), f"bpe_merge_loop_{digest}.so")
    if not os.path.exists(path):
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if compiler is None:
            raise OSError("no C compiler (cc, gcc or clang) found")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
        os.close(fd)
        try:
            proc = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", tmp, _SOURCE],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise OSError(f"{compiler} failed: {proc.stderr.strip()[:500]}")
            os.replace(tmp, path)  # atomic: concurrent ranks may build at the same time
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    lib = ctypes.CDLL(path)
    lib.bpe_train.restype = ctypes.c_int64
    lib.bpe_train.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, _PROGRESS, ctypes.c_int32]
    return lib


def available():
    """True when the C loop could be built and loaded (the reason is kept for `unavailable_reason`)."""
    global _lib, _error
    if _lib is None and _error is None:
        try:
            _lib = _build()
        except OSError as err:
            _error = str(err)
    return _lib is not None


def unavailable_reason():
    available()
    return _error


class _MergesView:
    """Read-only sequence of the first `n` merges in the output buffer (what on_merge callbacks receive)."""

    def __init__(self, pairs, n):
        self.pairs, self.n = pairs, n

    def __len__(self):
        return self.n

    def __getitem__(self, k):
        if not 0 <= k < self.n:
            raise IndexError(k)
        return int(self.pairs[2 * k]), int(self.pairs[2 * k + 1])

    def __iter__(self):
        return iter([tuple(p) for p in self.pairs[:2 * self.n].reshape(-1, 2).tolist()])


def train_merges_native(word_counts, num_merges, progress=None, on_merge=None):
    """Exact BPE with the C loop → trainer.MergeResult (same contract as train_merges_python)."""
    import numpy as np

    from gptlab.bpe.trainer import _out_of_pairs, finish_result

    if not available():
        raise RuntimeError(f"the C merge loop is unavailable: {_error}")
    words = [w for w in word_counts if len(w) >= 2]
    lengths = np.fromiter((len(w) for w in words), dtype=np.int32, count=len(words))
    starts = np.zeros(len(words), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    ids = np.frombuffer(b"".join(words), dtype=np.uint8).astype(np.int32)
    weights = np.fromiter((word_counts[w] for w in words), dtype=np.int64, count=len(words))
    if len(weights) and int(weights.max()) >= 2**62:
        raise UserError("a pre-token occurs more than 2**62 times; the C loop counts in 64 bits, use --engine python")
    out_pairs = np.zeros(2 * max(num_merges, 1), dtype=np.int32)
    out_counts = np.zeros(max(num_merges, 1), dtype=np.int64)
    state = {"reported": 0}

    def report(done):
        if progress is not None:
            progress(done - state["reported"])
            state["reported"] = done
        if on_merge is not None:  # a view, not a copy: this runs after every merge
            on_merge(done - 1, _MergesView(out_pairs, done))
        return 0

    callback = _PROGRESS(report)
    every = 1 if on_merge is not None else 256
    done = _lib.bpe_train(ids.ctypes.data, starts.ctypes.data, lengths.ctypes.data, weights.ctypes.data,
                          len(words), num_merges, out_pairs.ctypes.data, out_counts.ctypes.data, callback, every)
    if done == -1:
        raise MemoryError("the C merge loop ran out of memory")
    if progress is not None and done > state["reported"]:
        progress(done - state["reported"])
    if done < num_merges:
        _out_of_pairs(done, num_merges)
    merges = [tuple(p) for p in out_pairs[:2 * done].reshape(-1, 2).tolist()]
    return finish_result(merges, out_counts[:done].tolist())

# ===== gptlab/bpe/pretokenize.py =====
"""Pre-tokenization: a stream of documents → deduplicated {pre-token bytes: count}, in parallel, in bounded memory.

Each document is split on its own with the regex (so nothing spans two documents), and only the table of distinct
pre-tokens with 64-bit (Python int) counts is kept; raw text is never held whole. The parent process reads
documents and hands chunks of about `chunk_chars` characters to `workers` processes through a bounded queue; each
worker keeps its own table (`Counter.update` over `regex.findall`, both in C) and returns it once at the end, so
the parent merges only `workers` tables.

Lone surrogates (possible in JSON text) are replaced with U+FFFD before splitting, as tiktoken does when
encoding, so the trainer sees the same text the tokenizer will later encode.
"""
import itertools
import multiprocessing as mp
import os
import sys
from collections import Counter

DEFAULT_CHUNK_CHARS = 1 << 20


def clean_document(doc):
    """Text as tiktoken encodes it: lone surrogates become U+FFFD."""
    try:
        doc.encode("utf-8")
        return doc
    except UnicodeEncodeError:
        return doc.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def count_documents(docs, pattern):
    """Single-process reference path: {pre-token str: count} of an iterable of documents."""
    import regex

    findall = regex.compile(pattern).findall
    counter = Counter()
    for doc in docs:
        counter.update(findall(clean_document(doc)))
    return counter


def _worker(pattern, tasks, results):
    import regex

    findall = regex.compile(pattern).findall
    counter = Counter()
    while True:
        docs = tasks.get()
        if docs is None:
            break
        counter.update(itertools.chain.from_iterable(map(findall, docs)))
    results.put(dict(counter))


def to_bytes_table(str_counts):
    """{str: count} → {UTF-8 bytes: count} (distinct strings give distinct bytes, so no counts collide)."""
    return {word.encode("utf-8"): count for word, count in str_counts.items()}


def _check_clean(docs):
    """Replace lone surrogates in place; cheap check on the joined chunk first."""
    try:
        "".join(docs).encode("utf-8")
    except UnicodeEncodeError:
        docs[:] = [clean_document(d) for d in docs]
    return docs


def pretokenize(docs, pattern, workers=1, chunk_chars=DEFAULT_CHUNK_CHARS, progress=None):
    """Iterable of documents → ({pre-token bytes: count}, characters, documents).

    `progress(n_chars)` is called as text is handed out. `workers` <= 1 counts in this process (no start-up cost).
    """
    import regex

    chars = 0
    n_docs = 0

    def chunks():
        nonlocal chars, n_docs
        batch, size = [], 0
        for doc in docs:
            batch.append(doc)
            size += len(doc)
            n_docs += 1
            if size >= chunk_chars:
                chars += size
                yield _check_clean(batch)
                if progress is not None:
                    progress(size)
                batch, size = [], 0
        if batch:
            chars += size
            yield _check_clean(batch)
            if progress is not None:
                progress(size)

    if workers <= 1:
        findall = regex.compile(pattern).findall
        counter = Counter()
        for batch in chunks():
            counter.update(itertools.chain.from_iterable(map(findall, batch)))
        return to_bytes_table(counter), chars, n_docs

    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    tasks = ctx.Queue(maxsize=2 * workers)
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(pattern, tasks, results), daemon=True) for _ in range(workers)]
    for proc in procs:
        proc.start()
    try:
        for batch in chunks():
            _put(tasks, batch, procs)
        for _ in procs:
            _put(tasks, None, procs)
        tables = [_get(results, procs) for _ in procs]
    except BaseException:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        raise
    for proc in procs:
        proc.join()
    tables.sort(key=len, reverse=True)
    total = Counter(tables[0])
    for table in tables[1:]:
        total.update(table)
    return to_bytes_table(total), chars, n_docs


def _alive_or_raise(procs):
    dead = [p for p in procs if p.exitcode not in (None, 0)]
    if dead:
        raise RuntimeError(f"a pre-tokenization worker died (exit code {dead[0].exitcode}); "
                           "out of memory? try fewer --workers")


def _put(queue, item, procs):
    import queue as queue_mod

    while True:
        try:
            queue.put(item, timeout=1.0)
            return
        except queue_mod.Full:
            _alive_or_raise(procs)


def _get(queue, procs):
    import queue as queue_mod

    while True:
        try:
            return queue.get(timeout=1.0)
        except queue_mod.Empty:
            _alive_or_raise(procs)


def default_workers():
    """All cores of this rank: cpu count divided by the ranks sharing this machine."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, local_world))

# ===== gptlab/bpe/train.py =====
"""A whole tokenizer training run in one call (train_tokenizer.py is its command line).

    from gptlab.bpe.train import train_tokenizer
    trained = train_tokenizer(inputs=["data/sample/fineweb_edu_150docs.jsonl"], samples=400_000, vocabsize=1000,
                              out_path="tokenizers/t_v1000_n400000.pkl")

Steps: check the settings → pick the engine and device → every rank pre-tokenizes its share of the documents → the
ranks' (pre-token → count) tables are summed exactly → every rank runs the merge loop → the ranks' merges are compared → rank 0 saves the
tokenizer with its metadata and the trainer's source. Under torchrun (RANK / WORLD_SIZE set) the ranks meet in a
process group; a plain single-process CPU run never imports torch.

Which text: with local --input, the first `samples` characters of the files (in order, the last document cut) are
used whatever the world size; every rank reads that text and pre-tokenizes every W-th document of it, so 1 rank and
W ranks train on the same text and give byte-identical merges. From the Hub, each rank streams its own disjoint part
of the shuffled dataset and takes `samples / W` characters of it, so runs with different world sizes see different
(equally sized) text.
"""
import glob
import os
import platform
import sys
import time
from dataclasses import dataclass

from gptlab.errors import UserError

DATASET_CONFIG = "sample-10BT"  # the Hub config streamed when no local inputs are given
TEST_DIE_ENV = "GPTLAB_TEST_DIE_RANK"  # tests only: this rank calls os._exit(1) after counting its documents
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI_SCRIPT = "train_tokenizer.py"  # recorded in script_content with this package's sources
SAMPLE_CHARS = 400  # --demo: the start of the first non-blank document is rendered while merging


@dataclass
class TrainedTokenizer:
    result: object  # trainer.MergeResult: merges, mergeable_ranks, counts, duplicates
    metadata: dict  # what the pickle records under "metadata" (the same on every rank)
    pattern_name: str
    pat_str: str
    vocabsize: int  # 256 + merges; <|endoftext|> gets this id
    is_main: bool  # rank 0 (the rank that saves)
    out_path: str = None  # where rank 0 wrote it, None when not saved


def check_settings(samples, vocabsize, workers, pattern):
    """Bad numbers or pattern → UserError naming the flag and the fix; returns (pattern name, pattern string)."""
    from gptlab.tokenizer import MAX_VOCAB, resolve_pattern

    if samples <= 0:
        raise UserError(f"--samples must be a positive number of characters, got {samples}")
    if vocabsize < 256:
        raise UserError(f"--vocabsize {vocabsize} is below 256: the 256 byte tokens are always in the "
                        "vocabulary; use --vocabsize 256 or more")
    if vocabsize > MAX_VOCAB:
        raise UserError(f"--vocabsize {vocabsize} is too large (at most {MAX_VOCAB})")
    if vocabsize - 256 > samples:
        raise UserError(f"--vocabsize {vocabsize} needs {vocabsize - 256} merges but --samples "
                        f"{samples} characters cannot make that many; raise --samples or lower --vocabsize")
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be at least 1, got {workers}")
    return resolve_pattern(pattern)


def gpu_possible():
    """False when this machine has no GPU device node, so device "auto" can skip importing torch."""
    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd")) or sys.platform == "win32"


def choose_engine(device="auto", engine="auto"):
    """(engine, device string) for the merge loop: the native and Python loops need no torch at all."""
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise UserError(f"--device {device!r} is not one of auto, cpu, cuda")
    if device == "auto" and not gpu_possible():
        device = "cpu"
    if device != "cpu":
        from gptlab.distributed import resolve_device

        device = str(resolve_device(device, int(os.environ.get("LOCAL_RANK", "0"))))
    if engine == "auto" and device != "cpu":
        engine = "torch"
    elif engine in ("auto", "native"):
        from gptlab.bpe import native

        if native.available():
            engine = "native"
        elif engine == "native":
            raise UserError(f"--engine native is unavailable ({native.unavailable_reason()}); install a C "
                            "compiler or use --engine python")
        else:
            engine = "python"
            print(f"note: the C merge loop is unavailable ({native.unavailable_reason()}); using the slower "
                  "pure-Python loop (identical results)", file=sys.stderr, flush=True)
    if engine in ("python", "native") and device != "cpu":
        raise UserError(f"--engine {engine} runs on the CPU only; use --device cpu or --engine torch")
    return engine, device


def rank_budget(samples, rank, world_size):
    """This rank's share of `samples` characters (the first `samples % world_size` ranks take one more)."""
    return samples // world_size + (1 if rank < samples % world_size else 0)


def limit_chars(docs, budget, sample_box):
    """Documents until `budget` characters (the last one cut); the first non-blank one's start goes to sample_box.

    Stops without reading the document after the budget, so read statistics count only the text used."""
    used = 0
    if budget <= 0:
        return
    for doc in docs:
        if len(doc) > budget - used:
            doc = doc[:budget - used]
        if not sample_box and doc.strip():
            sample_box.append(doc[:SAMPLE_CHARS])
        used += len(doc)
        yield doc
        if used >= budget:
            return


def open_documents(inputs, dataset, seed, samples, rank, world_size, stats, sample_box):
    """(this rank's documents, already cut to the character budget; source description for the metadata).

    Local files: the global budget is applied to the whole stream first (exactly the text one rank would use), then
    the documents are dealt out round robin, so the text does not depend on the world size. The Hub: each rank
    streams its own part and takes its share of the budget. sample_box gets the first non-blank document's start."""
    from gptlab.text_sources import HUB_DATASETS, iter_hub_documents, iter_local_documents, take_every

    if inputs:
        source = {"input": list(inputs)}
        docs = take_every(limit_chars(iter_local_documents(inputs, stats), samples, sample_box), rank, world_size)
    else:
        repo_id = HUB_DATASETS[dataset]
        source = {"dataset": repo_id, "config": DATASET_CONFIG, "seed": seed}
        docs = limit_chars(iter_hub_documents(repo_id, DATASET_CONFIG, seed, rank, world_size, stats=stats),
                           rank_budget(samples, rank, world_size), sample_box)
    return docs, source


def combine_tables(tables):
    """{pre-token bytes: count} tables → one table with the counts summed (exact: Python ints)."""
    table = {}
    for part in tables:
        for word, count in part.items():
            table[word] = table.get(word, 0) + count
    return table


def merges_digest(result):
    """A fingerprint of the merges and ranks, compared across ranks."""
    from gptlab.tokenizer import ranks_sha256

    return ranks_sha256(result.mergeable_ranks) + str(hash(tuple(result.merges)))


def script_content():
    """train_tokenizer.py and every gptlab/bpe/*.py and *.c source (the C merge loop is the default engine),
    each under a `# ===== path =====` header."""
    cli = os.path.join(REPO_ROOT, CLI_SCRIPT)
    bpe_dir = os.path.join(REPO_ROOT, "gptlab", "bpe")
    sources = sorted(glob.glob(os.path.join(bpe_dir, "*.py")) + glob.glob(os.path.join(bpe_dir, "*.c")))
    paths = ([cli] if os.path.exists(cli) else []) + sources
    parts = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            parts.append(f"# ===== {os.path.relpath(path, REPO_ROOT)} =====\n{f.read()}")
    return "\n".join(parts)


def library_versions(uses_torch):
    import numpy
    import regex
    import tiktoken

    versions = {"python": platform.python_version(), "regex": str(regex.__version__), "numpy": str(numpy.__version__),
                "tiktoken": str(tiktoken.__version__)}
    if uses_torch:
        import torch

        versions["torch"] = str(torch.__version__)  # TorchVersion is a str subclass the safe loader refuses
    return versions


def _bar(enabled, **kwargs):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(file=sys.stderr, unit_scale=True, dynamic_ncols=True, mininterval=0.5, **kwargs)


def run_merges(table, num_merges, engine, device, show_progress=False, demo_sample="", pat_str=None):
    """The merge loop on `engine`; a non-empty demo_sample is printed coloured by token as the merges grow."""
    from gptlab.bpe.native import train_merges_native
    from gptlab.bpe.trainer import train_merges_python, train_merges_torch

    on_merge = None
    if demo_sample:
        from gptlab.bpe.demo import render

        shows = {max(0, int(num_merges * f) - 1) for f in (0.01, 0.1, 0.5, 1.0)} if num_merges else set()
        print(render(demo_sample, pat_str, []), flush=True)

        def show_sample(k, merges):
            if k in shows:
                print(render(demo_sample, pat_str, merges), flush=True)

        on_merge = show_sample

    bar = _bar(show_progress, total=num_merges, desc=f"merges ({engine}, {device})", unit="merge")
    progress = bar.update if bar is not None else None
    try:
        if engine == "native":
            return train_merges_native(table, num_merges, progress=progress, on_merge=on_merge)
        if engine == "python":
            return train_merges_python(table, num_merges, progress=progress, on_merge=on_merge)
        return train_merges_torch(table, num_merges, device=device, progress=progress, on_merge=on_merge)
    finally:
        if bar is not None:
            bar.close()


def save(trained, out_path, overwrite=False):
    """Write the tokenizer pickle (+ .merges.txt) at out_path; sets and returns trained.out_path."""
    from gptlab.tokenizer import EOT, save_tokenizer

    result = trained.result
    save_tokenizer(out_path, pat_str=trained.pat_str, pattern_name=trained.pattern_name, merges=result.merges,
                   mergeable_ranks=result.mergeable_ranks, special_tokens={EOT: trained.vocabsize},
                   metadata=trained.metadata, script_content=script_content(), overwrite=overwrite)
    trained.out_path = out_path
    return out_path


def train_tokenizer(*, samples, vocabsize, inputs=None, dataset="fineweb-edu", seed=0, pattern="gpt4",
                    device="auto", engine="auto", workers=None, demo=False, progress=True, out_path=None,
                    overwrite=False):
    """Train on `samples` characters of `inputs` (local files/globs) or, without them, the Hub `dataset`.

    With out_path, an existing file is refused before any work (unless overwrite) and rank 0 saves there.
    Under torchrun every rank calls this; all return the same TrainedTokenizer. progress: tqdm bars on rank 0;
    demo: rank 0 prints a sample coloured by token during training."""
    from gptlab.bpe.pretokenize import default_workers, pretokenize
    from gptlab.fileio import check_writable
    from gptlab.text_sources import ReadStats

    t0 = time.time()
    pattern_name, pat_str = check_settings(samples, vocabsize, workers, pattern)
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    is_main = rank == 0
    if out_path is not None:
        check_writable(out_path, overwrite)  # before any work
    engine, device = choose_engine(device, engine)
    workers = workers or default_workers()
    num_merges = vocabsize - 256

    # ---- this rank's documents → deduplicated pre-token table
    stats = ReadStats()
    sample_box = []
    docs, source = open_documents(inputs, dataset, seed, samples, rank, world_size, stats, sample_box)
    bar = _bar(is_main and progress, desc=f"pre-tokenize (rank 0 of {world_size}, {workers} workers)", unit="B")
    try:
        table, chars, n_docs = pretokenize(docs, pat_str, workers=workers,
                                           progress=bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    # every rank reads all the local text, so its count of replaced documents is already the total: rank 0 reports it
    replaced_docs = stats.replaced_docs if (not inputs or is_main) else 0
    local = {"table": table, "chars": chars, "docs": n_docs, "replaced_docs": replaced_docs,
             "sample": sample_box[0] if sample_box else ""}
    if os.environ.get(TEST_DIE_ENV) == str(rank):
        os._exit(1)

    ctx = None
    try:
        # ---- combine the ranks' tables exactly (sum of counts)
        if world_size > 1:
            from gptlab import distributed

            ctx = distributed.setup("cpu" if device == "cpu" else device)
            parts = distributed.all_gather_objects(ctx, local)
            table = combine_tables(p["table"] for p in parts)
        else:
            parts = [local]
        total_chars = sum(p["chars"] for p in parts)
        total_docs = sum(p["docs"] for p in parts)
        replaced_docs = sum(p["replaced_docs"] for p in parts)
        sample = next((p["sample"] for p in parts if p["sample"]), "")
        if total_chars == 0:
            raise UserError("the input holds no text (0 characters in "
                            f"{total_docs} documents); check --input or the dataset")
        if total_chars < samples and is_main:
            print(f"note: --samples {samples} asked for more text than the input has; trained on all "
                  f"{total_chars} characters ({total_docs} documents) and recorded that in the metadata",
                  file=sys.stderr, flush=True)
        if replaced_docs and is_main:
            print(f"note: {replaced_docs} documents held invalid UTF-8; those bytes were replaced with U+FFFD",
                  file=sys.stderr, flush=True)

        # ---- the merge loop (every rank runs it; the results are compared below)
        result = run_merges(table, num_merges, engine, device, show_progress=is_main and progress,
                            demo_sample=sample if demo and is_main else "", pat_str=pat_str)
        if ctx is not None:
            digests = distributed.all_gather_objects(ctx, merges_digest(result))
            if len(set(digests)) != 1:
                raise RuntimeError(f"ranks disagree on the merges ({digests}); this is a bug, please report it")
        metadata = {
            "vocabsize": vocabsize, "samples_requested": samples, "chars_used": total_chars,
            "docs": total_docs, "replaced_docs": replaced_docs, "source": source,
            "pattern_name": pattern_name, "wall_time_s": round(time.time() - t0, 3), "device": device,
            "engine": engine, "world_size": world_size, "workers_per_rank": workers,
            "versions": library_versions(engine == "torch" or world_size > 1),
            "duplicates": result.duplicates, "merge_counts": result.counts,
        }
        trained = TrainedTokenizer(result=result, metadata=metadata, pattern_name=pattern_name, pat_str=pat_str,
                                   vocabsize=vocabsize, is_main=is_main)
        if out_path is not None and is_main:
            save(trained, out_path, overwrite)
        if ctx is not None:
            distributed.barrier(ctx)  # the other ranks end only once rank 0 has saved
    finally:
        if ctx is not None:
            distributed.cleanup(ctx)
    return trained

# ===== gptlab/bpe/trainer.py =====
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
