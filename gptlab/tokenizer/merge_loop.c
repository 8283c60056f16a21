/* The exact BPE merge loop of gptlab/tokenizer/merges.py (train_merges_python), in C for speed.
 *
 * Same rule, same data structures, same results (tests compare them on every corpus):
 *   words      flat int32 ids, word w at [start[w], start[w] + len[w]), rewritten in place (merges only shrink)
 *   pairs      open-addressing hash table (key = left << 32 | right) → slot: 64-bit count + list of words that
 *              held the pair (appended lazily; stale or repeated entries are skipped when the pair is merged)
 *   heap       lazy max-heap of (count, slot): counts of existing pairs only decrease, so a stale top entry is
 *              re-pushed with its current count; ties → greatest (bytes(left), bytes(right)).
 * Built at run time by gptlab/tokenizer/native.py (cc -O2 -shared); without a C compiler the Python loop is used.
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

/* >0 when pair slot x ranks above y: larger count, then greater (bytes(left), bytes(right)) */
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
    return kx < ky;  /* unreachable (no two ids spell the same bytes, trainer.py); keeps the order total */
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
