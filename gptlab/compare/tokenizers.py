"""How tokenizers compare: compression (bytes per token) on held-out text, per domain; the share of the vocabulary
the text uses; the longest tokens; merges in common; encode throughput; a PNG of compression by domain.

    report = tokenizer_report(["a.pkl", "b.pkl"], text_paths=[...])   # compare_tokenizers.py's work
    print(render_report(report))

Bytes per token = UTF-8 bytes of the text / tokens of encode_ordinary, each document encoded on its own (special
tokens neither counted nor produced). Without texts, each tokenizer is measured on the validation documents of its
shard folder (data/*_<tokenizer stem>/val_*.bin, decoded back to text), else on the bundled sample.
"""
import glob
import os
import time
from dataclasses import dataclass, field

import numpy as np
from tabulate import tabulate

from gptlab.core.errors import UserError
from gptlab.core.files import atomic_write, check_writable
from gptlab.core.paths import repo_path
from gptlab.core.progress import progress_bar
from gptlab.dataset.selection import default_shard_folder
from gptlab.dataset.shards import MANIFEST_GLOB, check_manifest, read_shard
from gptlab.text.sources import iter_local_documents
from gptlab.tokenizer.format import EOT, encoding_from_dict, ranks_sha256, read_tokenizer_file

BUNDLED_SAMPLE = repo_path("data", "sample", "fineweb_edu_150docs.jsonl")
OVERLAP_AT = (10, 100, 1000, 10000)  # "first k merges": the k compared (and the whole of the smaller list)
LONGEST_SHOWN = 5
MIN_TIMING_S = 0.3  # encode the text again until this much time has passed, so the throughput is not noise


# ------------------------------------------------------------------------------------------------ the tokenizers
@dataclass
class ReportTokenizer:
    name: str
    path: str
    encoding: object  # tiktoken.Encoding
    mergeable_ranks: dict  # bytes -> id
    merges: list = None  # [(left bytes, right bytes), ...] in training order, when the file lists them
    recovered: list = field(default_factory=list)  # else the first merges, recovered from the ranks on demand
    label: str = None  # as the report shows it: the name, or "name (path)" when two files share a name

    def __post_init__(self):
        self.label = self.label or self.name

    @property
    def n_mergeable(self):
        return len(self.mergeable_ranks)

    @property
    def n_merges(self):
        return len(self.merges) if self.merges is not None else self.n_mergeable - 256

    def merge_pairs(self, limit):
        """The first `limit` merges as byte pairs."""
        if self.merges is not None:
            return self.merges[:limit]
        if len(self.recovered) < min(limit, self.n_merges):
            self.recovered = recover_merges(self.mergeable_ranks, limit)
        return self.recovered[:limit]


def load_report_tokenizer(path):
    data = read_tokenizer_file(path)
    name = data["name"]
    merges = None
    if data.get("merges"):
        merges = merge_pairs_of_file(data)
    return ReportTokenizer(name, data["path"], encoding_from_dict(data), data["mergeable_ranks"], merges)


def merge_pairs_of_file(data):
    """The file's merge list as byte pairs, checked against its ranks (merge k makes the token of id 256 + k, as
    train_tokenizer.py writes them): a list that disagrees would make the overlap figures wrong."""
    ranks, listed = data["mergeable_ranks"], data["merges"]
    damaged = UserError(f"{data['path']} is damaged: its merge list does not match its mergeable_ranks (merge k must "
                        "make the token of id 256 + k); retrain it with train_tokenizer.py")
    if not isinstance(listed, (list, tuple)) or len(listed) != len(ranks) - 256:
        raise damaged
    vocab = [bytes([i]) for i in range(256)]
    for k, pair in enumerate(listed):
        if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                or not all(isinstance(i, int) and 0 <= i < 256 + k for i in pair)):
            raise damaged
        token = vocab[pair[0]] + vocab[pair[1]]
        if ranks.get(token) != 256 + k:
            raise damaged
        vocab.append(token)
    return [(vocab[a], vocab[b]) for a, b in listed]


def recover_merges(mergeable_ranks, limit=None):
    """The merges of a rank table without a merge list (gpt-lab's older pickles, GPT-2's released vocabulary):
    a token of rank r is what BPE makes of its bytes with the tokens below r, which is exactly two parts."""
    ordered = sorted((rank, token) for token, rank in mergeable_ranks.items() if len(token) > 1)
    merges = []
    for rank, token in ordered[:limit]:
        parts = [bytes([b]) for b in token]
        while len(parts) > 2:
            best = min(range(len(parts) - 1),
                       key=lambda i: mergeable_ranks.get(parts[i] + parts[i + 1], float("inf")))
            joined = parts[best] + parts[best + 1]
            if mergeable_ranks.get(joined, rank) >= rank:
                break
            parts[best:best + 2] = [joined]
        if len(parts) != 2:
            raise UserError(f"token {token!r} (rank {rank}) is not one merge of two earlier tokens: the rank table is "
                            "not a BPE vocabulary")
        merges.append((parts[0], parts[1]))
    return merges


# ------------------------------------------------------------------------------------------------ texts
def shard_documents(encoding, paths):
    """The documents of token shards (each starts with <|endoftext|>), decoded back to text."""
    eot = encoding.eot_token
    docs = []
    for path in paths:
        tokens = np.asarray(read_shard(path))
        if tokens.size and int(tokens.max()) >= encoding.n_vocab:  # decode would raise on it
            raise UserError(f"shard {path} holds token id {int(tokens.max())} but the tokenizer has only "
                            f"{encoding.n_vocab} ids: it was made with a different tokenizer; pass --text FILE, or "
                            "re-tokenize with download_fineweb.py")
        starts = np.flatnonzero(tokens == eot)
        bounds = list(starts) + [tokens.size]
        if bounds[0] != 0 and tokens.size:
            bounds = [0] + bounds  # a shard that starts mid-document
        for lo, hi in zip(bounds, bounds[1:]):
            body = tokens[lo + (1 if tokens[lo] == eot else 0):hi]
            if body.size:
                docs.append(encoding.decode(body.tolist()))
    return docs


def validation_shards(tokenizer_name, data_dir="data"):
    """The val_*.bin of the tokenizer's shard folder, or [] when there is no single such folder."""
    try:
        folder = default_shard_folder(tokenizer_name, data_dir)
    except UserError:
        return []
    return sorted(glob.glob(os.path.join(folder, "val_*.bin")))


def refuse_named_twice(paths, flag, what):
    """One UserError for a file named twice (the same path after resolving links and '..')."""
    seen = {}
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:
            raise UserError(f"{flag} {path} is named twice (also as {seen[real]}); name each {what} once")
        seen[real] = path


def read_domains(text_paths):
    """{domain (file stem): [documents]} of --text files (.txt, .jsonl, .parquet)."""
    refuse_named_twice(text_paths, "--text", "file")  # it would be counted twice in "all bytes/token"
    domains = {}
    for path in text_paths:
        stem = os.path.splitext(os.path.basename(path))[0]
        name = stem if stem not in domains else f"{stem} ({path})"
        docs = [d for d in iter_local_documents([path]) if d]
        if not docs:
            raise UserError(f"--text {path} holds no text; pass a .txt, .jsonl (field text) or .parquet file with some")
        domains[name] = docs
    return domains


def default_domains(tokenizer, data_dir="data"):
    """(domains, description) for a tokenizer measured without --text: its validation shards, else the sample."""
    paths = validation_shards(tokenizer.name, data_dir)
    if paths:
        where = f"{os.path.dirname(paths[0])}/val_*.bin"
        if EOT not in tokenizer.encoding.special_tokens_set:
            raise UserError(f"{tokenizer.path} has no {EOT} token, so the documents of {where} cannot be told apart; "
                            "pass --text FILE")
        # a folder of the same name made with another tokenizer (retrained under that name) would decode to garbage
        folder = os.path.dirname(paths[0])
        if glob.glob(os.path.join(folder, MANIFEST_GLOB)):
            check_manifest(folder, ranks_sha256(tokenizer.mergeable_ranks), verify_files=False)
        docs = shard_documents(tokenizer.encoding, paths)
        if not docs:
            raise UserError(f"{where} holds no documents (empty shards); pass --text FILE, or rewrite the shards "
                            "with download_fineweb.py")
        return {"validation": docs}, where
    if not os.path.exists(BUNDLED_SAMPLE):
        raise UserError(f"{tokenizer.name} has no shard folder and the bundled sample {BUNDLED_SAMPLE} is missing; "
                        "pass --text FILE")
    return read_domains([BUNDLED_SAMPLE]), os.path.relpath(BUNDLED_SAMPLE)


# ------------------------------------------------------------------------------------------------ measuring
def shard_bytes_per_token(encoding, paths):
    """UTF-8 bytes per token of token shards, counted on the tokens themselves (no decoding): special tokens are
    left out of both counts. The leaderboard's Bytes/token column."""
    from gptlab.evals.bpb import token_byte_lengths  # heavy (~1 s: torch), only for the leaderboard's Bytes/token

    lengths = token_byte_lengths(encoding, encoding.n_vocab).numpy()
    total_bytes = total_tokens = 0
    for path in paths:
        counts = np.bincount(np.asarray(read_shard(path)), minlength=encoding.n_vocab)[:encoding.n_vocab]
        total_bytes += int(counts @ lengths)
        total_tokens += int(counts[lengths > 0].sum())
    return total_bytes / total_tokens if total_tokens else None


@dataclass
class DomainResult:
    bytes: int
    tokens: int
    documents: int

    @property
    def bytes_per_token(self):
        return self.bytes / self.tokens if self.tokens else None


@dataclass
class TokenizerResult:
    tokenizer: ReportTokenizer
    text_source: str
    domains: dict  # name -> DomainResult
    used_ids: int
    mb_per_s: float
    longest: list  # [(bytes, id), ...]

    @property
    def vocab_share(self):
        return self.used_ids / self.tokenizer.n_mergeable

    @property
    def overall(self):
        total = DomainResult(sum(d.bytes for d in self.domains.values()), sum(d.tokens for d in self.domains.values()),
                             sum(d.documents for d in self.domains.values()))
        return total


def measure(tokenizer, domains, text_source, progress=None):
    """Compression per domain, ids used, throughput (single thread) and the longest tokens of one tokenizer."""
    encode = tokenizer.encoding.encode_ordinary
    results, used = {}, np.zeros(tokenizer.encoding.n_vocab, dtype=bool)
    start = time.perf_counter()
    total_bytes = 0
    for name, docs in domains.items():
        n_bytes = n_tokens = 0
        for doc in docs:
            ids = encode(doc)
            size = len(doc.encode("utf-8"))
            n_bytes, n_tokens = n_bytes + size, n_tokens + len(ids)
            used[ids] = True
            if progress is not None:
                progress.update(size)
        results[name] = DomainResult(n_bytes, n_tokens, len(docs))
        total_bytes += n_bytes
    elapsed, encoded = time.perf_counter() - start, total_bytes
    all_docs = [d for docs in domains.values() for d in docs]
    while elapsed < MIN_TIMING_S and total_bytes:
        again = time.perf_counter()
        for doc in all_docs:
            encode(doc)
        elapsed += time.perf_counter() - again
        encoded += total_bytes
    longest = sorted(((token, rank) for token, rank in tokenizer.mergeable_ranks.items()),
                     key=lambda tr: (-len(tr[0]), tr[1]))[:LONGEST_SHOWN]
    return TokenizerResult(tokenizer, text_source, results, int(used.sum()),
                           encoded / elapsed / 1e6 if elapsed > 0 else None, longest)


@dataclass
class MergeOverlap:
    a: str
    b: str
    common_prefix: int  # how many first merges are identical, in order
    shares: list = field(default_factory=list)  # [(k, merges in common among the first k of each / k), ...]


def merge_overlap(a, b):
    """Merges compared as byte pairs (ids differ between tokenizers): the identical prefix and, for each k of
    OVERLAP_AT below the smaller count (and that count itself), the share of the first k merges both have."""
    smaller = min(a.n_merges, b.n_merges)
    pairs_a, pairs_b = a.merge_pairs(smaller), b.merge_pairs(smaller)
    prefix = next((i for i, (x, y) in enumerate(zip(pairs_a, pairs_b)) if x != y), smaller)
    shares = [(k, len(set(pairs_a[:k]) & set(pairs_b[:k])) / k)
              for k in sorted({k for k in OVERLAP_AT if k < smaller} | {smaller}) if k > 0]
    return MergeOverlap(a.label, b.label, prefix, shares)


@dataclass
class Report:
    results: list  # TokenizerResult per tokenizer
    overlaps: list  # MergeOverlap per pair
    same_text: bool


def tokenizer_report(paths, text_paths=(), data_dir="data", progress=True):
    if not paths:
        raise UserError("name at least one tokenizer .pkl (a path or a name in tokenizers/)")
    tokenizers = [load_report_tokenizer(p) for p in paths]
    refuse_named_twice([t.path for t in tokenizers], "tokenizer", "tokenizer")
    for t in tokenizers:  # same file name in two folders: tell the rows apart by path
        if sum(u.name == t.name for u in tokenizers) > 1:
            t.label = f"{t.name} ({t.path})"
    shared = read_domains(text_paths) if text_paths else None
    results = []
    for tokenizer in tokenizers:
        if shared is not None:
            domains, source = shared, ", ".join(text_paths)
        else:
            domains, source = default_domains(tokenizer, data_dir)
        total = sum(len(d.encode("utf-8")) for docs in domains.values() for d in docs)
        with progress_bar(total=total, unit="B", unit_scale=True, desc=f"encode {tokenizer.name}",
                          disable=not progress, dynamic_ncols=True) as bar:
            results.append(measure(tokenizer, domains, source, bar))
    overlaps = [merge_overlap(a, b) for i, a in enumerate(tokenizers) for b in tokenizers[i + 1:]]
    return Report(results, overlaps, len({r.text_source for r in results}) == 1)


# ------------------------------------------------------------------------------------------------ output
def _table(headers, rows):
    """A plain-text table, cells left-aligned as given: tabulate's "simple" format, as the leaderboard's
    (gptlab/compare/tables.py's text_table)."""
    return tabulate(rows, headers, "simple", disable_numparse=True, stralign="left")


def _show_token(token):
    return repr(token.decode("utf-8", errors="backslashreplace"))


def render_report(report):
    out = []
    domain_names = list(dict.fromkeys(name for r in report.results for name in r.domains))
    headers = ["Tokenizer", "Vocab"] + [f"{d} bytes/token" for d in domain_names] + (
        ["all bytes/token"] if len(domain_names) > 1 else []) + ["Vocab used", "Encode MB/s"]
    rows = []
    for r in report.results:
        cells = [r.tokenizer.label, f"{r.tokenizer.n_mergeable:,}"]
        cells += [f"{r.domains[d].bytes_per_token:.3f}" if d in r.domains and r.domains[d].tokens else "—"
                  for d in domain_names]
        if len(domain_names) > 1:
            cells.append(f"{r.overall.bytes_per_token:.3f}")
        cells += [f"{100 * r.vocab_share:.1f}% ({r.used_ids:,})", f"{r.mb_per_s:.2f}" if r.mb_per_s else "—"]
        rows.append(cells)
    out += [_table(headers, rows), ""]
    out.append("bytes/token: UTF-8 bytes / tokens (encode_ordinary, one document at a time; higher = more "
               "compression). Vocab used: share of the tokenizer's non-special tokens the text produced. Encode: one thread.")
    for r in report.results:
        sizes = ", ".join(f"{name}: {d.documents:,} document{'' if d.documents == 1 else 's'}, {d.bytes:,} bytes"
                          for name, d in r.domains.items())
        out.append(f"{r.tokenizer.label}: text {r.text_source} ({sizes})")
    if not report.same_text:
        out.append("note: the tokenizers were measured on different texts (each on its own validation shards); pass "
                   "--text FILE to compare them on the same text")
    out += ["", "Longest tokens:"]
    for r in report.results:
        out.append(f"  {r.tokenizer.label}: " + ", ".join(f"{_show_token(t)} ({len(t)} B)" for t, _ in r.longest))
    if report.overlaps:
        out += ["", "Merges in common (as byte pairs; first k merges of each):"]
        for o in report.overlaps:
            shares = ", ".join(f"first {k:,}: {100 * s:.1f}%" for k, s in o.shares)
            out.append(f"  {o.a} vs {o.b}: identical first {o.common_prefix:,} merges" + (f"; {shares}" if shares else ""))
    return "\n".join(out) + "\n"


def plot_report(report, path, overwrite=False):
    """Bars of bytes/token by domain (one colour per tokenizer) in a PNG, written atomically."""
    import matplotlib  # heavy (~0.4 s with pyplot): only when a PNG is drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display needed

    check_writable(path, overwrite)
    domain_names = list(dict.fromkeys(name for r in report.results for name in r.domains))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(domain_names) * max(1, len(report.results)) ** 0.5 + 3), 4.5),
                           dpi=100)
    width = 0.8 / len(report.results)
    for i, r in enumerate(report.results):
        xs = [j + (i - (len(report.results) - 1) / 2) * width for j in range(len(domain_names))]
        ys = [r.domains[d].bytes_per_token if d in r.domains else 0.0 for d in domain_names]
        bars = ax.bar(xs, ys, width, label=r.tokenizer.label)
        ax.bar_label(bars, fmt="%.2f", fontsize="x-small")
    ax.set_xticks(range(len(domain_names)), domain_names)
    ax.set_ylabel("bytes per token (higher = more compression)")
    ax.set_title("Tokenizer compression by domain")
    ax.legend(fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    with atomic_write(path, "wb", overwrite=overwrite) as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return path
