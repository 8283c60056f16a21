/* Native pre-tokenizer: the built-in split patterns (format.PATTERNS gpt4 and gpt2) as hand-written scanners over
 * UTF-8, and a (pre-token bytes → count) hash table, so a chunk of documents is split and deduplicated in C.
 *
 * Exactly regex.findall's splits (tests/unit/test_pretok_native.py fuzzes the two against each other). Both
 * patterns match at every position, so the pre-tokens tile the text and each scanner only finds where the
 * current one ends, taking the alternatives in the pattern's order:
 *   gpt4  '(?i:[sdmt]|ll|ve|re) | [^\r\n\p{L}\p{N}]?+\p{L}+ | \p{N}{1,3} | ' '?[^\s\p{L}\p{N}]++[\r\n]* |
 *         \s*[\r\n] | \s+(?!\S) | \s+
 *   gpt2  '(?:[sdmt]|ll|ve|re) | ' '?\p{L}+ | ' '?\p{N}+ | ' '?[^\s\p{L}\p{N}]+ | \s+(?!\S) | \s+
 * Input must be valid UTF-8 (Python's str.encode after lone surrogates were replaced); a document is split on
 * its own (the end of the buffer is the end of the text for (?!\S)). Character classes come from the generated
 * pretok_tables.h (unicode_classes.py, from the installed `regex`). Built by gptlab/tokenizer/native.py.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pretok_tables.h"

#define CLASS_END 0x80 /* past the end of the text: no class, and not "other" either */
#define PAT_GPT4 0
#define PAT_GPT2 1

static inline int class_of_cp(uint32_t cp) {
    return CLASS_STAGE2[(uint32_t)CLASS_STAGE1[cp >> 8] * 256 + (cp & 255)];
}

/* code point at s[i] (i < n), its length in *len; in invalid UTF-8 too, it never reads past s[n - 1] and
 * returns a code point the class tables hold */
static inline uint32_t decode(const uint8_t *s, int64_t i, int64_t n, int *len) {
    uint32_t b = s[i];
    if (b < 0x80) { *len = 1; return b; }
    if (i + (b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4) > n) { *len = (int)(n - i); return 0xFFFD; }
    if (b < 0xE0) { *len = 2; return ((b & 0x1F) << 6) | (s[i + 1] & 0x3F); }
    if (b < 0xF0) { *len = 3; return ((b & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F); }
    *len = 4;
    uint32_t cp = ((b & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
    return cp < 0x110000 ? cp : 0xFFFD; /* the class tables end at U+10FFFF */
}

/* class bits of the character at s[i] (CLASS_END at the end), its length in *len */
static inline int class_at(const uint8_t *s, int64_t i, int64_t n, int *len) {
    if (i >= n) { *len = 0; return CLASS_END; }
    if (s[i] < 0x80) { *len = 1; return CLASS_STAGE2[s[i]]; } /* block 0 holds U+0000..U+00FF */
    return class_of_cp(decode(s, i, n, len));
}

#define IS_OTHER(k) (((k) & (CLASS_L | CLASS_N | CLASS_W | CLASS_END)) == 0) /* [^\s\p{L}\p{N}] */

/* end of the run of characters whose class has `bit`, from i */
static inline int64_t run_of(const uint8_t *s, int64_t i, int64_t n, int bit) {
    int len;
    while (i < n) {
        if (s[i] < 0x80) {
            if (!(CLASS_STAGE2[s[i]] & bit)) break;
            i++;
        } else {
            if (!(class_of_cp(decode(s, i, n, &len)) & bit)) break;
            i += len;
        }
    }
    return i;
}

static inline int64_t run_of_other(const uint8_t *s, int64_t i, int64_t n) {
    int len;
    while (i < n) {
        int k = class_at(s, i, n, &len);
        if (!IS_OTHER(k)) break;
        i += len;
    }
    return i;
}

/* the whitespace alternatives from i (s[i] is whitespace): \s*[\r\n] (gpt4 only) | \s+(?!\S) | \s+ */
static inline int64_t whitespace_end(const uint8_t *s, int64_t i, int64_t n, int newline_alt) {
    int64_t j = i, last_start = i, after_newline = -1;
    int len;
    while (j < n) {
        int k = class_at(s, j, n, &len);
        if (!(k & CLASS_W)) break;
        if (s[j] == '\r' || s[j] == '\n') after_newline = j + 1;
        last_start = j;
        j += len;
    }
    if (newline_alt && after_newline > 0) return after_newline; /* greedy \s* backs off to the last \r or \n */
    if (j == n) return j;                                      /* (?!\S) holds at the end of the text */
    if (last_start > i) return last_start;                     /* \s+(?!\S): all but the last character */
    return j;                                                  /* \s+: a single whitespace character */
}

static int64_t next_gpt4(const uint8_t *s, int64_t i, int64_t n) {
    int len0, len1, len2;
    if (s[i] == '\'' && i + 1 < n) {
        int f1 = fold_letter(decode(s, i + 1, n, &len1));
        if (f1 == 's' || f1 == 'd' || f1 == 'm' || f1 == 't') return i + 1 + len1;
        if ((f1 == 'l' || f1 == 'v' || f1 == 'r') && i + 1 + len1 < n) {
            int f2 = fold_letter(decode(s, i + 1 + len1, n, &len2));
            if ((f1 == 'l' && f2 == 'l') || (f1 != 'l' && f2 == 'e')) return i + 1 + len1 + len2;
        }
    }
    int k0 = class_at(s, i, n, &len0);
    if (k0 & CLASS_L) return run_of(s, i + len0, n, CLASS_L);
    if (!(k0 & CLASS_N) && s[i] != '\r' && s[i] != '\n') {
        int k1 = class_at(s, i + len0, n, &len1);
        if (k1 & CLASS_L) return run_of(s, i + len0 + len1, n, CLASS_L);
    }
    if (k0 & CLASS_N) {
        int64_t j = i + len0;
        for (int taken = 1; taken < 3; taken++) {
            if (!(class_at(s, j, n, &len1) & CLASS_N)) break;
            j += len1;
        }
        return j;
    }
    int64_t j = -1;
    if (s[i] == ' ' && IS_OTHER(class_at(s, i + 1, n, &len1))) j = run_of_other(s, i + 1, n);
    else if (IS_OTHER(k0)) j = run_of_other(s, i + len0, n);
    if (j >= 0) {
        while (j < n && (s[j] == '\r' || s[j] == '\n')) j++;
        return j;
    }
    return whitespace_end(s, i, n, 1);
}

static int64_t next_gpt2(const uint8_t *s, int64_t i, int64_t n) {
    int len0, len1;
    if (s[i] == '\'' && i + 1 < n) {
        uint8_t c = s[i + 1];
        if (c == 's' || c == 'd' || c == 'm' || c == 't') return i + 2;
        if (i + 2 < n && ((c == 'l' && s[i + 2] == 'l') || ((c == 'v' || c == 'r') && s[i + 2] == 'e'))) return i + 3;
    }
    int64_t start = i;
    if (s[i] == ' ') {
        int k1 = class_at(s, i + 1, n, &len1);
        if ((k1 & (CLASS_L | CLASS_N)) || IS_OTHER(k1)) start = i + 1; /* ' ?' then one of the three runs */
    }
    int k = class_at(s, start, n, &len0);
    if (k & CLASS_L) return run_of(s, start + len0, n, CLASS_L);
    if (k & CLASS_N) return run_of(s, start + len0, n, CLASS_N);
    if (IS_OTHER(k)) return run_of_other(s, start + len0, n);
    return whitespace_end(s, i, n, 0);
}

/* ---- the split itself (the fuzz test compares it with regex.findall): pre-token end offsets into `ends` */
int64_t pt_split(const uint8_t *s, int64_t n, int pattern, int64_t *ends, int64_t cap) {
    int64_t i = 0, count = 0;
    while (i < n) {
        i = pattern == PAT_GPT2 ? next_gpt2(s, i, n) : next_gpt4(s, i, n);
        if (count < cap) ends[count] = i;
        count++;
    }
    return count; /* more than cap: call again with a larger buffer */
}

/* ---- (pre-token bytes → count) table: insertion-ordered entries, an open-addressing index over them */
typedef struct {
    uint8_t *arena; int64_t arena_len, arena_cap;   /* the keys' bytes, one after another */
    int64_t *off, *len, *count; int64_t n, cap;      /* entry e: arena[off[e] : off[e] + len[e]], count[e] */
    uint64_t *slots; int64_t mask;                   /* (hash's high 32 bits) << 32 | entry + 1; 0 = empty */
} Table;

static inline uint64_t hash_bytes(const uint8_t *p, int64_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w; memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL; h ^= h >> 32;
        p += 8; n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, (size_t)n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 29; h *= 0xff51afd7ed558ccdULL; h ^= h >> 32;
    return h;
}

void pt_free(Table *t) {
    if (!t) return;
    free(t->arena); free(t->off); free(t->len); free(t->count); free(t->slots); free(t);
}

Table *pt_new(void) {
    Table *t = calloc(1, sizeof(Table));
    if (!t) return NULL;
    t->arena_cap = 1 << 16; t->cap = 1 << 12; t->mask = (1 << 13) - 1;
    t->arena = malloc(t->arena_cap);
    t->off = malloc(t->cap * sizeof(int64_t)); t->len = malloc(t->cap * sizeof(int64_t));
    t->count = malloc(t->cap * sizeof(int64_t));
    t->slots = calloc(t->mask + 1, sizeof(uint64_t));
    if (!t->arena || !t->off || !t->len || !t->count || !t->slots) { pt_free(t); return NULL; }
    return t;
}

static int grow_slots(Table *t) {
    int64_t size = (t->mask + 1) * 2;
    uint64_t *slots = calloc(size, sizeof(uint64_t));
    if (!slots) return -1;
    for (int64_t e = 0; e < t->n; e++) {
        uint64_t h = hash_bytes(t->arena + t->off[e], t->len[e]);
        uint64_t at = h & (size - 1);
        while (slots[at]) at = (at + 1) & (size - 1);
        slots[at] = (h >> 32 << 32) | (uint64_t)(e + 1);
    }
    free(t->slots); t->slots = slots; t->mask = size - 1;
    return 0;
}

static int grow_entries(Table *t) {
    int64_t cap = t->cap * 2;
    int64_t *off = realloc(t->off, cap * sizeof(int64_t));
    if (!off) return -1;
    t->off = off;
    int64_t *len = realloc(t->len, cap * sizeof(int64_t));
    if (!len) return -1;
    t->len = len;
    int64_t *count = realloc(t->count, cap * sizeof(int64_t));
    if (!count) return -1;
    t->count = count; t->cap = cap;
    return 0;
}

/* count[key] += by; 0, or -1 when out of memory (the table is unchanged then) */
static int add_key(Table *t, const uint8_t *key, int64_t n, int64_t by) {
    uint64_t h = hash_bytes(key, n), tag = h >> 32 << 32;
    uint64_t at = h & t->mask;
    for (uint64_t slot; (slot = t->slots[at]) != 0; at = (at + 1) & t->mask) {
        if ((slot >> 32 << 32) == tag) {
            int64_t e = (int64_t)(slot & 0xffffffffULL) - 1;
            if (t->len[e] == n && memcmp(t->arena + t->off[e], key, (size_t)n) == 0) {
                t->count[e] += by;
                return 0;
            }
        }
    }
    if (t->n >= 0xfffffffeLL) return -1; /* entry + 1 must fit the slot's low 32 bits */
    if (t->n == t->cap && grow_entries(t)) return -1;
    if (t->arena_len + n > t->arena_cap) {
        int64_t cap = t->arena_cap * 2;
        while (cap < t->arena_len + n) cap *= 2;
        uint8_t *arena = realloc(t->arena, (size_t)cap);
        if (!arena) return -1;
        t->arena = arena; t->arena_cap = cap;
    }
    memcpy(t->arena + t->arena_len, key, (size_t)n);
    int64_t e = t->n++;
    t->off[e] = t->arena_len; t->len[e] = n; t->count[e] = by;
    t->arena_len += n;
    t->slots[at] = tag | (uint64_t)(e + 1);
    if (t->n * 2 > t->mask + 1 && grow_slots(t)) return -1;
    return 0;
}

/* split and count `ndocs` documents laid end to end in buf (document d is doc_lens[d] bytes); 0 or -1 (memory) */
int pt_scan(Table *t, const uint8_t *buf, const int64_t *doc_lens, int64_t ndocs, int pattern) {
    for (int64_t d = 0; d < ndocs; d++) {
        const uint8_t *s = buf;
        int64_t n = doc_lens[d], i = 0;
        while (i < n) {
            int64_t j = pattern == PAT_GPT2 ? next_gpt2(s, i, n) : next_gpt4(s, i, n);
            if (add_key(t, s + i, j - i, 1)) return -1;
            i = j;
        }
        buf += n;
    }
    return 0;
}

/* add an exported table (keys laid end to end, their lengths and counts); 0 or -1 (memory) */
int pt_add(Table *t, const uint8_t *arena, const int64_t *lens, const int64_t *counts, int64_t n) {
    for (int64_t e = 0; e < n; e++) {
        if (add_key(t, arena, lens[e], counts[e])) return -1;
        arena += lens[e];
    }
    return 0;
}

int64_t pt_entries(const Table *t) { return t->n; }
int64_t pt_key_bytes(const Table *t) { return t->arena_len; }

/* the entries in insertion order: keys end to end into arena (pt_key_bytes), lengths and counts (pt_entries) */
void pt_export(const Table *t, uint8_t *arena, int64_t *lens, int64_t *counts) {
    memcpy(arena, t->arena, (size_t)t->arena_len);
    memcpy(lens, t->len, (size_t)t->n * sizeof(int64_t));
    memcpy(counts, t->count, (size_t)t->n * sizeof(int64_t));
}
