# ===== train_tokenizer.py =====
"""Train an exact byte-level BPE tokenizer → tokenizers/{name}_v{vocabsize}_n{samples}.pkl (+ .merges.txt).

    python   train_tokenizer.py --samples 100000 --vocabsize 1000 --name readmetokenizer --demo
    python   train_tokenizer.py --input data/sample/fineweb_edu_150docs.jsonl --samples 500000 --vocabsize 2048
    torchrun --nproc_per_node=G train_tokenizer.py --samples 1000000000 --vocabsize 65534 --name gpt4regex

--samples counts characters of text: with --input, the first --samples characters of the files, whatever the
world size; streamed from the Hub, --samples / world_size per rank. --vocabsize counts the 256 bytes plus the
merges (the one special token, <|endoftext|>, gets id vocabsize). Every rank pre-tokenizes its own share of the
documents with --workers processes, the deduplicated (pre-token → count) tables are combined exactly, and the
merge loop (gptlab/tokenizer/merges.py) gives the same merges on CPU, GPU and any number of ranks.
The work is gptlab/tokenizer/job.py's train_tokenizer(); this file only reads the flags and reports.
"""
import os
import signal
import time

from gptlab.core.cli import ArgumentParser, FlagValueError, HelpFormatter
from gptlab.core.errors import StopRequested, run_cli
from gptlab.data.sources import HUB_DATASETS
from gptlab.tokenizer.format import EOT, tokenizer_filename
from gptlab.tokenizer.job import DATASET_CONFIG, train_tokenizer


def file_prefix(name):
    """--name: the start of the tokenizer's file name."""
    if not name.strip():
        raise FlagValueError(f"{name!r} is empty; give a file name prefix, e.g. --name mytok")
    if "/" in name:
        raise FlagValueError(f"{name!r} must be a plain file name prefix (no '/')")
    return name


def parse_args(argv=None):
    ap = ArgumentParser(description=__doc__.split("\n\n")[0],
                        formatter_class=HelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--samples", type=int, default=10_000_000, help="characters of text to train on (all ranks)")
    ap.add_argument("--vocabsize", type=int, default=8192, help="256 bytes + merges, excluding <|endoftext|>")
    ap.add_argument("--name", type=file_prefix, default="tokenizer", help="file name prefix")
    ap.add_argument("--input", nargs="+", metavar="PATH", help="local .txt/.jsonl/.parquet files or globs; "
                    "without it FineWeb(-Edu) is streamed from the HuggingFace Hub")
    ap.add_argument("--dataset", choices=sorted(HUB_DATASETS), default="fineweb",
                    help=f"Hub dataset when no --input is given (config {DATASET_CONFIG})")
    ap.add_argument("--seed", type=int, default=0, help="shuffle seed of the streamed dataset")
    ap.add_argument("--pattern", default="gpt4", help="pre-tokenization regex: gpt4, gpt2 or a regex")
    ap.add_argument("--device", default="auto",
                    help="where the merge loop runs: auto (the CPU's C loop, which beats a GPU at this job; a GPU "
                         "only with --engine torch or without a C compiler), cpu, cuda or cuda:N")
    ap.add_argument("--engine", choices=["auto", "native", "python", "torch"], default="auto",
                    help="merge loop: auto = native (C, built on first use) or else python on CPU, torch on "
                         "CUDA; all give identical merges")
    ap.add_argument("--pretokenizer", choices=["auto", "native", "regex"], default="auto",
                    help="splitter: auto = native (C scanner of the gpt4/gpt2 patterns, built on first use) or "
                         "else regex, which any --pattern uses; both give identical merges")
    ap.add_argument("--workers", type=int, default=None,
                    help="pre-tokenization processes per rank (default: this rank's share of the cores)")
    ap.add_argument("--out", default="tokenizers", help="output folder")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing tokenizer file")
    ap.add_argument("--demo", action="store_true", help="print a sample coloured by token during training")
    return ap.parse_args(argv)


def stop_on_sigterm(signum, frame):
    """SIGTERM (kill, a scheduler's preemption) ends a single-process run as Ctrl-C does (StopRequested is a
    KeyboardInterrupt): the pre-tokenizer workers are terminated and the output's lock released on the way out, and
    run_cli exits 143. Under torchrun a rank keeps the default action (torchrun's SIGTERM must end a rank blocked in
    a collective, where no Python handler runs); its workers end with it all the same (die_with_parent)."""
    raise StopRequested(signum)


def main(argv=None):
    t0 = time.time()
    if "WORLD_SIZE" not in os.environ:  # not a torchrun rank: see stop_on_sigterm
        signal.signal(signal.SIGTERM, stop_on_sigterm)
    args = parse_args(argv)
    out_path = os.path.join(args.out, tokenizer_filename(args.name, args.vocabsize, args.samples))
    trained = train_tokenizer(inputs=args.input, dataset=args.dataset, seed=args.seed, samples=args.samples,
                              vocabsize=args.vocabsize, pattern=args.pattern, device=args.device, engine=args.engine,
                              workers=args.workers, demo=args.demo, out_path=out_path, overwrite=args.overwrite,
                              pretokenizer=args.pretokenizer)
    if trained.is_main:
        meta = trained.metadata
        print(f"wrote {out_path} ({args.vocabsize} tokens + {EOT}, {meta['chars_used']:,} characters, "
              f"{meta['docs']:,} documents) in {time.time() - t0:.1f}s", flush=True)
    return out_path


if __name__ == "__main__":
    run_cli(main)

# ===== gptlab/tokenizer/__init__.py =====
"""The tokenizer: exact byte-level BPE training and the saved format.

format.py       the .pkl format (save, safe load → tiktoken.Encoding), split patterns, <|endoftext|>
job.py          a whole training run in one call, `train_tokenizer(...)`: settings, engine/device choice, character
                budget, pre-tokenization, exact combining across ranks, merge loop, cross-rank check, save
pretokenize.py  documents → deduplicated {pre-token bytes: count}, in parallel worker processes
merges.py       the exact merge rule; `train_merges_python` (reference-grade, no torch) and `train_merges_torch`
                (vectorised, any device: the --device cuda path)
native.py       the same loop in C (merge_loop.c, compiled on first use): the default CPU engine
demo.py         --demo rendering of a sample coloured by token
Every engine gives identical merges; train_tokenizer.py is the command line over job.py.
"""

# ===== gptlab/tokenizer/demo.py =====
"""--demo: show a sample text split into its tokens while the merges are learned: each token on its own ANSI
background colour on a terminal, tokens between `|` elsewhere (a log file gets no escape codes)."""
from gptlab.tokenizer.format import encoding_from_dict
from gptlab.tokenizer.merges import finish_result

# 256-colour background codes that keep black text readable
_COLOURS = [153, 194, 224, 230, 189, 159, 217, 187, 225, 158]


def encode_with_merges(text, pattern, merges):
    """Token byte strings of `text` under the merges learned so far, encoded as the saved tokenizer would be:
    a tiktoken Encoding of their ranks."""
    ranks = finish_result(merges, counts=[]).mergeable_ranks
    encoding = encoding_from_dict({"pat_str": pattern, "mergeable_ranks": ranks, "special_tokens": {}},
                                  name=f"demo_{len(merges)}")
    return [encoding.decode_single_token_bytes(token) for token in encoding.encode_ordinary(text)]


def render(text, pattern, merges, colour=True):
    """The sample with each token on its own background colour (colour=False: tokens separated by `|`), plus a
    token count line."""
    tokens = encode_with_merges(text, pattern, merges)
    parts, pending = [], b""
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
        parts.append(f"\x1b[48;5;{_COLOURS[len(parts) % len(_COLOURS)]}m\x1b[30m{shown}\x1b[0m" if colour else shown)
    if pending:
        parts.append(pending.decode("utf-8", errors="replace"))
    n_bytes = len(text.encode("utf-8"))
    ratio = n_bytes / max(1, len(tokens))
    return (f"--- after {len(merges)} merges: {len(tokens)} tokens for {n_bytes} bytes "
            f"({ratio:.2f} bytes/token) ---\n" + ("" if colour else "|").join(parts) + "\n")

# ===== gptlab/tokenizer/format.py =====
"""The tokenizer file: one owner for its format, its safe loading and its naming.

A tokenizer is a pickle of plain Python values (str, bytes, int, float, bool, None, list, tuple, dict):

    format="gptlab-tokenizer", format_version=1,
    pat_str, pattern_name, mergeable_ranks {bytes: id}, special_tokens {str: id}, merges [[left_id, right_id], ...],
    vocabsize (merges + 256, excluding special tokens), metadata {...}, script_content (the trainer's source)

gpt-lab's older pickles ({pat_str, mergeable_ranks, script_content}, `<|endoftext|>` = len(mergeable_ranks)) load too.
Loading never executes code: the unpickler refuses every global, so a pickle that carries anything but plain
values (a class, a function, `os.system`, ...) is rejected.

`regex` and `tiktoken` (~25 ms together) are imported by the functions that compile or encode: commands that only
read, name or hash tokenizer files import this module without them (train_tokenizer.py --help, compare_experiments.py).
"""
import glob
import hashlib
import io
import os
import pickle
from collections import Counter, OrderedDict
from dataclasses import dataclass

from gptlab.core.errors import UserError
from gptlab.core.files import atomic_write

TOKENIZER_DIR = "tokenizers"
FORMAT_NAME = "gptlab-tokenizer"
FORMAT_VERSION = 1
EOT = "<|endoftext|>"

# GPT-4 (cl100k) split pattern, as used by minbpe / nanochat / gpt-lab, and the GPT-2 pattern.
PATTERNS = {
    "gpt4": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+""",
    "gpt2": r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
}

MAX_VOCAB = 2**31 - 2  # ids are stored as int32 in the trainer and at least uint16/uint32 in shards


# Text a pattern with nested repetition backtracks catastrophically on: a long run of one kind of character and an
# end that makes the match fail. Splitting all of it takes a few ms with a sane pattern.
PROBE_RUNS = ("a", "0", " ", "\n", "!", "é", "ab", "a ", "a0", "a!", " \n", "'", "\t")
PROBE_ENDS = ("", "!", "\x00", " ", "a", "0", "\n")
PROBE_CHARS = 200  # length of each run
PROBE_TIMEOUT_S = 0.5  # for all probes together (regex checks its clock coarsely: up to ~3x this)


def backtracking_probe(compiled):
    """None, or the probe text (shortened) on which `compiled` took over PROBE_TIMEOUT_S: it backtracks
    catastrophically and would hang on real text."""
    import time

    deadline = time.monotonic() + PROBE_TIMEOUT_S
    for run in PROBE_RUNS:
        for end in PROBE_ENDS:
            text = run * (PROBE_CHARS // len(run)) + end
            try:
                compiled.findall(text, timeout=max(deadline - time.monotonic(), 1e-3))
            except TimeoutError:
                return f"{run * 3}…{end}"
    return None


def split_pattern_problem(pat):
    """None when `pat` can split text (compiles with `regex`, never matches the empty string, splits the probe
    texts in time), else ("invalid", error), ("empty", None) or ("slow", probe text)."""
    import regex  # ~10 ms: see the module docstring

    try:
        compiled = regex.compile(pat)
    except regex.error as err:
        return "invalid", err
    if compiled.fullmatch("") is not None:
        return "empty", None
    if pat in PATTERNS.values():  # the built-in patterns are known to be linear
        return None
    probe = backtracking_probe(compiled)
    return ("slow", probe) if probe is not None else None


def _slow_pattern(probe):
    return (f"backtracks catastrophically: splitting {PROBE_CHARS} characters like {probe!r} took over "
            f"{PROBE_TIMEOUT_S} s (nested repetition such as (a+)+ or (\\w|\\w\\w)+)")


def resolve_pattern(pattern):
    """'gpt4' | 'gpt2' | a regex → (name, pattern string); a regex that does not compile is a UserError."""
    name, pat = (pattern, PATTERNS[pattern]) if pattern in PATTERNS else ("custom", pattern)
    problem = split_pattern_problem(pat)
    if problem and problem[0] == "invalid":
        raise UserError(f"--pattern {pattern!r} is neither gpt4, gpt2 nor a valid regex ({problem[1]})")
    if problem and problem[0] == "slow":
        raise UserError(f"--pattern {pattern!r} {_slow_pattern(problem[1])}; rewrite it with possessive "
                        "quantifiers (++, *+) or atomic groups, or use gpt4 / gpt2")
    if problem:
        raise UserError(f"--pattern {pattern!r} matches the empty string, so it cannot split text; fix the regex")
    import tiktoken  # ~15 ms: see the module docstring

    try:  # the saved tokenizer (and the --demo) encode with tiktoken, whose regex engine knows less syntax
        tiktoken.Encoding("pattern_check", pat_str=pat, mergeable_ranks={bytes([i]): i for i in range(256)},
                          special_tokens={})
    except ValueError as err:
        raise UserError(f"--pattern {pattern!r} is a valid regex but tiktoken cannot use it ({err}); "
                        "rewrite it without that syntax, or use gpt4 / gpt2") from None
    return name, pat


def tokenizer_filename(name, vocabsize, samples):
    return f"{name}_v{vocabsize}_n{samples}.pkl"


def ranks_sha256(mergeable_ranks):
    """A hash of the vocabulary (bytes → id), independent of metadata: two files that encode alike agree."""
    h = hashlib.sha256()
    for token, rank in sorted(mergeable_ranks.items(), key=lambda kv: kv[1]):
        h.update(rank.to_bytes(8, "little"))
        h.update(len(token).to_bytes(4, "little"))
        h.update(token)
    return h.hexdigest()


def save_tokenizer(path, *, pat_str, pattern_name, merges, mergeable_ranks, special_tokens, metadata,
                   script_content, overwrite=False):
    """Write the tokenizer pickle and a readable `<stem>.merges.txt` next to it, both atomically: the text is
    written first and renamed last, so a failed write (a full disk) leaves neither new file."""
    payload = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "pat_str": pat_str,
        "pattern_name": pattern_name,
        "mergeable_ranks": dict(mergeable_ranks),
        "special_tokens": dict(special_tokens),
        "merges": [[int(a), int(b)] for a, b in merges],
        "vocabsize": 256 + len(merges),
        "metadata": dict(metadata),
        "script_content": script_content,
    }
    merges_path = merges_txt_path(path)
    with atomic_write(merges_path, "w", overwrite=True) as merges_file:
        merges_file.write(format_merges(merges, mergeable_ranks, metadata.get("merge_counts")))
        merges_file.flush()  # its own write errors surface here, before the pickle replaces anything
        with atomic_write(path, "wb", overwrite=overwrite) as f:
            pickle.dump(payload, f, protocol=4)
    return path


def merges_txt_path(pkl_path):
    return os.path.splitext(pkl_path)[0] + ".merges.txt"


def format_merges(merges, mergeable_ranks, counts=None):
    """One line per merge: rank, left part, right part, new token, count (bytes shown as Python literals)."""
    id_to_bytes = token_bytes_by_id(merges)
    lines = ["# rank\tleft\tright\tnew_token\tcount"]
    for k, (a, b) in enumerate(merges):
        count = counts[k] if counts is not None else ""
        lines.append(f"{256 + k}\t{id_to_bytes[a]!r}\t{id_to_bytes[b]!r}\t{id_to_bytes[256 + k]!r}\t{count}")
    return "\n".join(lines) + "\n"


def token_bytes_by_id(merges):
    """List id → bytes for the 256 byte tokens and every merge (a merge's id is 256 + its index)."""
    vocab = [bytes([i]) for i in range(256)]
    for a, b in merges:
        vocab.append(vocab[a] + vocab[b])
    return vocab


# ---------------------------------------------------------------------------------------------- safe loading
MAX_TOKENIZER_BYTES = 256 * 2**20  # a vocabulary of 2**20 tokens takes ~40 MB; larger files are refused unread


class _RefusedGlobal(pickle.UnpicklingError):
    """The pickle names a class or function: loading it could run code."""


def _from_values(kind):
    """`kind` built only from values the pickle itself holds (a list, tuple, ...): never from a size, so a pickle of
    a few bytes cannot make the loader allocate gigabytes (bytearray(3_000_000_000))."""
    def build(*args):
        if not args:
            return kind()
        if len(args) == 1 and isinstance(args[0], (bytes, bytearray) if kind is bytearray
                                          else (list, tuple, set, frozenset, dict)):
            return kind(args[0])
        if kind is bytearray and len(args) == 2 and isinstance(args[0], str) and args[1] in ("latin-1", "latin1"):
            return bytearray(args[0], args[1])  # how protocols 0-2 pickle a bytearray
        raise _RefusedGlobal(f"refusing {kind.__name__}() of {', '.join(type(a).__name__ for a in args)}: a "
                             "tokenizer's containers are built from their items only")
    build.__name__ = kind.__name__
    return build


# the only globals a pickle may name, each as a constructor that takes items only
_ALLOWED_GLOBALS = {("builtins", "set"): _from_values(set), ("builtins", "frozenset"): _from_values(frozenset),
                    ("builtins", "bytearray"): _from_values(bytearray),
                    ("collections", "OrderedDict"): _from_values(OrderedDict)}


class _PlainValuesUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _ALLOWED_GLOBALS:
            return _ALLOWED_GLOBALS[module, name]
        raise _RefusedGlobal(f"refusing to load global {module}.{name}: a tokenizer holds plain values only")


def safe_unpickle(data, source="<bytes>"):
    """Unpickle plain Python values only; anything that would import or call code is a UserError."""
    try:
        return _PlainValuesUnpickler(io.BytesIO(data)).load()
    except Exception as err:
        if not data.startswith(b"\x80"):  # pickles of protocol 2+ (all of ours, gpt-lab's) start with PROTO
            raise UserError(f"{source} is not a tokenizer: not a pickle file at all; pass a .pkl written by "
                            "train_tokenizer.py") from None
        if isinstance(err, _RefusedGlobal):
            raise UserError(f"{source} is not a safe tokenizer pickle ({str(err).rstrip('.')}); only load "
                            "tokenizers you trust, or retrain it with train_tokenizer.py") from None
        raise UserError(f"{source} is not a tokenizer pickle ({type(err).__name__}: {err}); "  # e.g. truncated
                        "retrain it with train_tokenizer.py") from None


def resolve_tokenizer_path(name_or_path, tokenizer_dir=TOKENIZER_DIR):
    """A path, or a file name inside tokenizers/ (with or without .pkl)."""
    candidates = [name_or_path, os.path.join(tokenizer_dir, name_or_path),
                  os.path.join(tokenizer_dir, name_or_path + ".pkl")]
    for path in candidates:
        if os.path.isfile(path):
            return path
    if os.path.isdir(name_or_path):
        raise UserError(f"tokenizer {name_or_path!r} is a folder, not a tokenizer file; give the path of a .pkl "
                        "file (e.g. tokenizers/NAME_vVOCAB_nSAMPLES.pkl) or its name inside tokenizers/")
    have = sorted(os.path.basename(p) for p in glob.glob(os.path.join(tokenizer_dir, "*.pkl")))
    where = os.path.abspath(tokenizer_dir)  # relative to the current folder: say which one was searched
    hint = f"available in {where}/: {', '.join(have)}" if have else f"{where}/ has no tokenizers yet"
    raise UserError(f"tokenizer {name_or_path!r} not found ({hint}); train one with train_tokenizer.py")


def read_tokenizer_file(name_or_path, tokenizer_dir=TOKENIZER_DIR):
    """The tokenizer's dict, checked and normalised to the current format (old gpt-lab pickles get defaults)."""
    path = resolve_tokenizer_path(name_or_path, tokenizer_dir)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TOKENIZER_BYTES + 1)  # never more: a huge file is not read whole
    except OSError as err:
        raise UserError(f"tokenizer {path} is not readable ({err.strerror or err}); check its permissions "
                        "(chmod a+r) or retrain it with train_tokenizer.py") from None
    if len(raw) > MAX_TOKENIZER_BYTES:
        raise UserError(f"{path} is larger than {MAX_TOKENIZER_BYTES // 2**20} MiB, far more than any tokenizer "
                        "(2**20 tokens take ~40 MB); it is not a tokenizer file")
    data = safe_unpickle(raw, path)
    if not isinstance(data, dict) or "pat_str" not in data or "mergeable_ranks" not in data:
        raise UserError(f"{path} is a pickle but not a tokenizer (it needs pat_str and mergeable_ranks); "
                        "train one with train_tokenizer.py")
    ranks = data["mergeable_ranks"]
    if not isinstance(ranks, dict) or not all(isinstance(k, bytes) and isinstance(v, int) for k, v in ranks.items()):
        raise UserError(f"{path}: mergeable_ranks must map bytes to int; the file is damaged, retrain it "
                        "with train_tokenizer.py")
    out = dict(data)
    out.setdefault("format", "gpt-lab-legacy")
    out.setdefault("pattern_name", "custom")
    out.setdefault("special_tokens", {EOT: len(ranks)})
    out.setdefault("vocabsize", len(ranks))
    out.setdefault("metadata", {})
    out.setdefault("script_content", "")
    check_tokenizer_dict(out, path)
    out["path"] = path
    return out


def _is_id(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_VOCAB


def check_tokenizer_dict(data, source):
    """What tiktoken needs, checked up front so a damaged file is one UserError (naming `source`), never a panic."""
    def damaged(problem):
        return UserError(f"{source} is damaged: {problem}; retrain it with train_tokenizer.py")

    pat_str = data["pat_str"]
    if not isinstance(pat_str, str):
        raise damaged(f"pat_str is a {type(pat_str).__name__}, not a regex string")
    problem = split_pattern_problem(pat_str)
    if problem and problem[0] == "invalid":
        raise damaged(f"pat_str {pat_str[:80]!r} is not a valid regex ({problem[1]})")
    if problem and problem[0] == "slow":
        raise damaged(f"pat_str {pat_str[:80]!r} {_slow_pattern(problem[1])}, so encoding could hang")
    if problem:
        raise damaged(f"pat_str {pat_str[:80]!r} matches the empty string, so it cannot split text")
    ranks = data["mergeable_ranks"]
    if not all(_is_id(v) for v in ranks.values()):
        bad = next(v for v in ranks.values() if not _is_id(v))
        raise damaged(f"mergeable_ranks holds the id {bad!r}; ids must be ints from 0 to {MAX_VOCAB}")
    missing = [i for i in range(256) if bytes([i]) not in ranks]
    if missing:
        raise damaged(f"mergeable_ranks lacks {len(missing)} of the 256 single bytes (first: {bytes(missing[:1])!r}), "
                      "so some text could not be encoded")
    rank_ids = set(ranks.values())
    if len(rank_ids) != len(ranks):
        dup = Counter(ranks.values()).most_common(1)[0][0]
        raise damaged(f"mergeable_ranks gives the id {dup} to more than one token")
    special = data["special_tokens"]
    if not isinstance(special, dict) or not all(isinstance(k, str) and _is_id(v) for k, v in special.items()):
        raise damaged(f"special_tokens must map str to int ids from 0 to {MAX_VOCAB}, got {str(special)[:120]}")
    special_counts = Counter(special.values())
    clashes = sorted(tok for tok, v in special.items() if v in rank_ids or special_counts[v] > 1)
    if clashes:
        raise damaged(f"the id of special token {', '.join(clashes)} collides with another token's id")


def encoding_from_dict(data, name=None):
    """A tiktoken.Encoding from a tokenizer dict (fast encode_ordinary / decode / eot_token / n_vocab).

    What tiktoken still refuses (a regex its engine cannot parse, a Rust panic) is a UserError naming the file."""
    import tiktoken  # ~15 ms: see the module docstring

    source = data.get("path", "the tokenizer")
    name = name or os.path.splitext(os.path.basename(data.get("path", "gptlab")))[0]
    try:
        return tiktoken.Encoding(name=name, pat_str=data["pat_str"], mergeable_ranks=data["mergeable_ranks"],
                                 special_tokens=data["special_tokens"])
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # ValueError, or pyo3_runtime.PanicException (a BaseException) from the Rust core
        raise UserError(f"{source}: tiktoken cannot build an encoder from it ({type(err).__name__}: "
                        f"{str(err).splitlines()[0][:200] if str(err) else ''}); retrain it with train_tokenizer.py"
                        ) from None


def load_tokenizer(name_or_path, tokenizer_dir=TOKENIZER_DIR):
    """The project's one loader: name or path → tiktoken.Encoding."""
    return encoding_from_dict(read_tokenizer_file(name_or_path, tokenizer_dir))


def eot_id(data):
    """The `<|endoftext|>` id of a tokenizer dict."""
    if EOT not in data["special_tokens"]:
        raise UserError(f"{data.get('path', 'tokenizer')} has no {EOT} special token, which documents need")
    return data["special_tokens"][EOT]


@dataclass(frozen=True)
class LoadedTokenizer:
    """A tokenizer file, loaded and checked: its Encoding and what a training run records about it."""
    encoding: "tiktoken.Encoding"  # noqa: F821 (tiktoken is imported lazily)
    eot: int  # the <|endoftext|> id: documents start with it
    name: str  # the file's stem, e.g. quickstart_v1000_n400000: the shard folders' suffix
    path: str
    ranks_sha256: str  # identifies the merges, whatever the file is called
    train_script: str  # the trainer's source, kept in the pickle

    def model_vocab_size(self, requested=None):
        """Embedding rows for a model of this tokenizer: `requested`, checked, or the tokenizer's n_vocab."""
        n_vocab = self.encoding.n_vocab
        if requested is None:
            return n_vocab
        if requested > MAX_VOCAB:
            raise UserError(f"--vocab_size {requested} exceeds {MAX_VOCAB}, the largest id a token can have here; "
                            f"this tokenizer needs {n_vocab}")
        if requested < n_vocab:
            raise UserError(f"--vocab_size {requested} is smaller than the tokenizer's vocabulary: {self.name} has "
                            f"{n_vocab} ids including special tokens; pass --vocab_size {n_vocab}")
        return requested


def open_tokenizer(name_or_path, tokenizer_dir=TOKENIZER_DIR):
    """A name (in tokenizers/) or path → LoadedTokenizer; every problem with the file is one UserError."""
    data = read_tokenizer_file(name_or_path, tokenizer_dir)
    return LoadedTokenizer(encoding=encoding_from_dict(data), eot=eot_id(data),
                           name=os.path.splitext(os.path.basename(data["path"]))[0], path=data["path"],
                           ranks_sha256=ranks_sha256(data["mergeable_ranks"]), train_script=data["script_content"])

# ===== gptlab/tokenizer/job.py =====
"""A whole tokenizer training run in one call (train_tokenizer.py is its command line).

    from gptlab.tokenizer.job import train_tokenizer
    trained = train_tokenizer(inputs=["data/sample/fineweb_edu_150docs.jsonl"], samples=400_000, vocabsize=1000,
                              out_path="tokenizers/t_v1000_n400000.pkl")

Steps: check the settings → pick the engine and device → rank 0 checks that the output can be written and locks it
(a second trainer of the same file is refused; every rank stops with the same error) → every rank pre-tokenizes its
share of the documents → the ranks' (pre-token → count) tables are summed exactly → every rank runs the merge loop
→ the ranks' merges are compared → rank 0 saves the tokenizer with its metadata and the trainer's source. Under
torchrun (RANK / WORLD_SIZE set) the ranks meet in a process group; a plain single-process CPU run never imports
torch.

Which text: with local --input, the first `samples` characters of the files (in order, the last document cut) are
used whatever the world size; every rank reads that text and pre-tokenizes every W-th document of it, so 1 rank and
W ranks train on the same text and give byte-identical merges. From the Hub, each rank streams its own files of the
dataset (data.sources.hub_share: no file is downloaded by two ranks), shuffled within the rank, and takes
`samples / W` characters of them, so runs with different world sizes see different (equally sized) text.
"""
import contextlib
import glob
import os
import platform
import sys
import time
from dataclasses import dataclass

from gptlab.core import distributed
from gptlab.core.distributed import check_device_flag, default_workers, resolve_device
from gptlab.core.errors import UserError
from gptlab.core.files import check_writable, exclusive_lock, write_fix
from gptlab.core.progress import is_terminal, progress_bar
from gptlab.data.sources import HUB_DATASETS, ReadStats, iter_hub_documents, iter_local_documents, take_every
from gptlab.tokenizer import native
from gptlab.tokenizer.demo import render
from gptlab.tokenizer.format import EOT, MAX_VOCAB, ranks_sha256, resolve_pattern, save_tokenizer
from gptlab.tokenizer.merges import train_merges_python, train_merges_torch
from gptlab.tokenizer.native import train_merges_native
from gptlab.tokenizer.pretokenize import DEFAULT_CHUNK_CHARS, native_pattern_name, pretokenize, resolve_pretokenizer

DATASET_CONFIG = "sample-10BT"  # the Hub config streamed when no local inputs are given
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI_SCRIPT = "train_tokenizer.py"  # recorded in script_content with this package's sources
SAMPLE_CHARS = 400  # --demo: the start of the first non-blank document is rendered while merging
ERROR_ACK_TIMEOUT_S = 10  # how long rank 0 waits for the other ranks to read its error


@dataclass
class TrainedTokenizer:
    result: object  # trainer.MergeResult: merges, mergeable_ranks, counts
    metadata: dict  # what the pickle records under "metadata" (the same on every rank)
    pattern_name: str
    pat_str: str
    vocabsize: int  # 256 + merges; <|endoftext|> gets this id
    is_main: bool  # rank 0 (the rank that saves)
    out_path: str = None  # where rank 0 wrote it, None when not saved


def check_settings(samples, vocabsize, workers, pattern):
    """Bad numbers or pattern → UserError naming the flag and the fix; returns (pattern name, pattern string)."""
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
    check_device_flag(device)
    if device == "auto":
        # The C loop on the CPU unless the torch loop is asked for (or there is no C compiler and maybe a GPU):
        # at 921 MB / vocab 65534 the C loop took 8.5 s for 65,278 merges (0.13 ms each, 6% of the run), while the
        # torch loop launches ~125 small kernels per merge, which alone costs more than that on a GPU.
        wants_torch = engine == "torch" or (engine == "auto" and not native.available())
        if not (wants_torch and gpu_possible()):
            device = "cpu"
    if device != "cpu":
        device = str(resolve_device(device))
    if engine == "auto" and device != "cpu":
        engine = "torch"
    elif engine in ("auto", "native"):
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


def choose_pretokenizer(pat_str, choice="auto", announce=True):
    """"native" or "regex" for --pretokenizer `choice` (pretokenize.resolve_pretokenizer); auto falling back to
    regex for a built-in pattern (no C compiler) is announced in a note."""
    kind = resolve_pretokenizer(pat_str, choice)
    if choice == "auto" and kind == "regex" and native_pattern_name(pat_str) is not None and announce:
        print(f"note: the native pre-tokenizer is unavailable ({native.scanner_unavailable_reason()}); using the "
              "slower regex splitter (identical results)", file=sys.stderr, flush=True)
    return kind


def choose_workers(requested, budget_chars, announce=True):
    """Pre-tokenization processes for one rank: the request (default: this rank's cores), lowered to this rank's
    cores and to one per chunk of its `budget_chars` characters (workers are handed whole chunks, so more would
    sit idle). A lowered request is announced in a note."""
    cores = default_workers()
    chunks = max(1, -(-budget_chars // DEFAULT_CHUNK_CHARS))
    workers = min(requested or cores, cores, chunks)
    if requested and workers < requested and announce:
        print(f"note: --workers {requested} lowered to {workers}: each rank uses at most its {cores} core(s) and "
              f"one worker per {DEFAULT_CHUNK_CHARS:,} characters of its text ({budget_chars:,} here)",
              file=sys.stderr, flush=True)
    return workers


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
    if inputs:
        source = {"input": list(inputs)}
        docs = take_every(limit_chars(iter_local_documents(inputs, stats, max_chars=samples), samples, sample_box),
                         rank, world_size)
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
    return ranks_sha256(result.mergeable_ranks) + str(hash(tuple(result.merges)))


def script_content():
    """train_tokenizer.py and every gptlab/tokenizer/*.py and *.c source (the C merge loop is the default engine),
    each under a `# ===== path =====` header."""
    cli = os.path.join(REPO_ROOT, CLI_SCRIPT)
    bpe_dir = os.path.join(REPO_ROOT, "gptlab", "tokenizer")
    sources = sorted(glob.glob(os.path.join(bpe_dir, "*.py")) + glob.glob(os.path.join(bpe_dir, "*.c")))
    paths = ([cli] if os.path.exists(cli) else []) + sources
    parts = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            parts.append(f"# ===== {os.path.relpath(path, REPO_ROOT)} =====\n{f.read()}")
    return "\n".join(parts)


def library_versions(uses_torch):
    # lazy: train_tokenizer.py --help imports this module, and these are only read for their versions here
    import numpy  # ~45 ms
    import regex  # ~10 ms
    import tiktoken  # ~15 ms

    versions = {"python": platform.python_version(), "regex": str(regex.__version__), "numpy": str(numpy.__version__),
                "tiktoken": str(tiktoken.__version__)}
    if uses_torch:
        import torch  # heavy (~1 s): only when the run used it

        versions["torch"] = str(torch.__version__)  # TorchVersion is a str subclass the safe loader refuses
    return versions


def _bar(enabled, **kwargs):
    if not enabled:
        return None
    return progress_bar(file=sys.stderr, unit_scale=True, dynamic_ncols=True, mininterval=0.5, **kwargs)


def _read_rate_updater(bar, stats):
    """progress(n_chars) for the pre-tokenize bar that also shows the read rate (MB/s of input, documents/s),
    which for a Hub stream is the download's."""
    t0 = time.perf_counter()

    def update(n_chars):
        elapsed = max(time.perf_counter() - t0, 1e-9)
        bar.set_postfix_str(f"{stats.bytes_read / elapsed / 1e6:.1f} MB/s, {stats.docs / elapsed:.0f} docs/s",
                            refresh=False)
        bar.update(n_chars)

    return update


def run_merges(table, num_merges, engine, device, show_progress=False, demo_sample="", pat_str=None):
    """The merge loop on `engine`; a non-empty demo_sample is printed split into tokens as the merges grow."""
    on_merge = None
    if demo_sample:
        shows = {max(0, int(num_merges * f) - 1) for f in (0.01, 0.1, 0.5, 1.0)} if num_merges else set()
        colour = is_terminal(sys.stdout)  # escape codes only where a terminal draws them
        print(render(demo_sample, pat_str, [], colour), flush=True)

        def show_sample(k, merges):
            if k in shows:
                print(render(demo_sample, pat_str, merges, colour), flush=True)

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
    """Write the tokenizer pickle (+ .merges.txt) at out_path; sets and returns trained.out_path. A failed write
    (a full disk) is a UserError, with nothing half-written left."""
    result = trained.result
    try:
        save_tokenizer(out_path, pat_str=trained.pat_str, pattern_name=trained.pattern_name, merges=result.merges,
                       mergeable_ranks=result.mergeable_ranks, special_tokens={EOT: trained.vocabsize},
                       metadata=trained.metadata, script_content=script_content(), overwrite=overwrite)
    except OSError as err:
        raise UserError(f"could not write the tokenizer {out_path} ({err.strerror or err}); nothing half-written "
                        f"was left; {write_fix(err)}, then train again") from None
    trained.out_path = out_path
    return out_path


def lock_path_for(out_path):
    """The lock file beside a tokenizer file: tokenizers/.NAME.pkl.lock."""
    folder, name = os.path.split(out_path)
    return os.path.join(folder, f".{name}.lock")


@contextlib.contextmanager
def claim_output(out_path, overwrite=False):
    """Check that out_path can be written (by writing in its folder) and hold its lock for the block, so a second
    trainer of the same file is refused at once, naming this one."""
    check_writable(out_path, overwrite)  # before the lock creates the folder
    with exclusive_lock(lock_path_for(out_path), f"tokenizer {out_path}"):
        check_writable(out_path, overwrite)  # again: a writer that just finished may have made it
        yield


def on_rank0_for_all(store, key, action):
    """Run action() on rank 0 only (the rank that writes) and tell every rank its outcome through `store`
    (distributed.rendezvous_store; None: a single process) under `key`: a UserError it raises is raised on every
    rank, so all ranks stop together with the same clear error instead of waiting for rank 0 or being killed."""
    if store is None:
        action()
        return
    others = int(os.environ.get("WORLD_SIZE", "1")) - 1
    if int(os.environ.get("RANK", "0")) == 0:
        try:
            action()
        except UserError as err:
            store.set(key, "error:" + str(err))
            # wait (briefly) until the others have read it, so they exit with it rather than being killed
            deadline = time.time() + ERROR_ACK_TIMEOUT_S
            while store.add(key + "/read", 0) < others and time.time() < deadline:
                time.sleep(0.05)
            raise
        store.set(key, "ok")
        return
    outcome = store.get(key).decode()  # waits for rank 0
    if outcome.startswith("error:"):
        store.add(key + "/read", 1)
        raise UserError(outcome[len("error:"):])


def train_tokenizer(*, samples, vocabsize, inputs=None, dataset="fineweb-edu", seed=0, pattern="gpt4",
                    device="auto", engine="auto", workers=None, demo=False, progress=True, out_path=None,
                    overwrite=False, pretokenizer="auto"):
    """Train on `samples` characters of `inputs` (local files/globs) or, without them, the Hub `dataset`.

    With out_path, before any work rank 0 refuses an existing file (unless overwrite) or an unwritable folder and
    locks the file against a second trainer; it saves there at the end. Under torchrun every rank calls this; all
    return the same TrainedTokenizer. progress: tqdm bars on rank 0; demo: rank 0 prints a sample coloured by
    token during training. pretokenizer: auto, native (the C scanner, built-in patterns) or regex; all give the
    same merges."""
    t0 = time.time()
    pattern_name, pat_str = check_settings(samples, vocabsize, workers, pattern)
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    is_main = rank == 0
    requested_device = device
    engine, device = choose_engine(device, engine)
    pretokenizer = choose_pretokenizer(pat_str, pretokenizer, announce=is_main)
    workers = choose_workers(workers, rank_budget(samples, rank, world_size), announce=is_main)
    num_merges = vocabsize - 256

    store = None
    if world_size > 1:
        store = distributed.rendezvous_store()  # the process group itself starts after pre-tokenization
    ctx = None
    with contextlib.ExitStack() as held:  # the output's lock, held until the end
        if out_path is not None:
            on_rank0_for_all(store, "gptlab/train_tokenizer/claim",
                             lambda: held.enter_context(claim_output(out_path, overwrite)))
        try:
            # ---- this rank's documents → deduplicated pre-token table
            stats = ReadStats()
            sample_box = []
            docs, source = open_documents(inputs, dataset, seed, samples, rank, world_size, stats, sample_box)
            bar = _bar(is_main and progress, desc=f"pre-tokenize (rank 0 of {world_size}, {workers} workers)",
                       unit="char")
            try:
                update = _read_rate_updater(bar, stats) if bar is not None else None
                table, chars, n_docs = pretokenize(docs, pat_str, workers=workers, pretokenizer=pretokenizer,
                                                   progress=update)
            finally:
                if bar is not None:
                    bar.close()
            # every rank reads all the local text, so its count of replaced documents is already the total: rank 0
            # reports it
            replaced_docs = stats.replaced_docs if (not inputs or is_main) else 0
            local = {"table": table, "chars": chars, "docs": n_docs, "replaced_docs": replaced_docs,
                     "sample": sample_box[0] if sample_box else ""}

            # ---- combine the ranks' tables exactly (sum of counts)
            if world_size > 1:
                ctx = distributed.setup("cpu" if device == "cpu" else requested_device)  # it resolves it again
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
                "engine": engine, "pretokenizer": pretokenizer, "world_size": world_size, "workers_per_rank": workers,
                "versions": library_versions(engine == "torch" or world_size > 1),
                "merge_counts": result.counts,
            }
            trained = TrainedTokenizer(result=result, metadata=metadata, pattern_name=pattern_name,
                                       pat_str=pat_str, vocabsize=vocabsize, is_main=is_main)
            if out_path is not None:  # rank 0 saves; the others end only once it has, with its error if any
                on_rank0_for_all(store, "gptlab/train_tokenizer/save", lambda: save(trained, out_path, overwrite))
        finally:
            if ctx is not None:
                distributed.cleanup(ctx)
    return trained

# ===== gptlab/tokenizer/merge_loop.c =====
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

# ===== gptlab/tokenizer/merges.py =====
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

# ===== gptlab/tokenizer/native.py =====
"""The C parts of the trainer, compiled on first use with the system C compiler and loaded with ctypes:

- the merge loop (merge_loop.c): exactly `merges.train_merges_python` (tests compare the two on every corpus),
  the default CPU engine when a compiler is available; otherwise `available()` is False and the Python loop runs;
- the pre-tokenizer (pretok_scan.c): the gpt4/gpt2 patterns split exactly as `regex.findall` splits them and
  counted in C (`NativeCounter`), with character classes generated from the installed `regex`
  (unicode_classes.py); otherwise `scanner_available()` is False and pretokenize.py uses `regex`.

Each shared library is cached per source hash (and, for the scanner, regex's version) in $GPTLAB_CACHE
(default ~/.cache/gptlab).
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

from gptlab.core.errors import UserError
from gptlab.tokenizer.merges import _out_of_pairs, finish_result

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "merge_loop.c")
_lib = None
_error = None
_PROGRESS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32)


def _cache_dir():
    default = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "gptlab")
    return os.environ.get("GPTLAB_CACHE", default)


def _compile(sources, name, key, generated=None):
    """Compile `sources` into $GPTLAB_CACHE/{name}_{digest}.so unless cached; the digest covers the sources, the
    interpreter and `key`. generated: a function giving {file name: text} for the include path of the build (a
    generated header), called only when building. Returns the library's path; OSError when there is no compiler
    or it fails."""
    digest = hashlib.sha256(sys.version.encode() + key.encode())
    for source in sources:
        with open(source, "rb") as f:
            digest.update(f.read())
    path = os.path.join(_cache_dir(), f"{name}_{digest.hexdigest()[:16]}.so")
    if os.path.exists(path):
        return path
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise OSError("no C compiler (cc, gcc or clang) found")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as build_dir:
        for file_name, text in (generated() if generated else {}).items():
            with open(os.path.join(build_dir, file_name), "w", encoding="utf-8") as f:
                f.write(text)
        tmp = os.path.join(build_dir, "lib.so")
        proc = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-I", build_dir, "-o", tmp, *sources],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise OSError(f"{compiler} failed: {proc.stderr.strip()[:500]}")
        os.replace(tmp, path)  # atomic: concurrent ranks may build at the same time
    return path


def _build():
    lib = ctypes.CDLL(_compile([_SOURCE], "bpe_merge_loop", ""))
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
    import numpy as np  # ~45 ms: train_tokenizer.py --help imports this module (through tokenizer.job)

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


# ---- the native pre-tokenizer (pretok_scan.c): the built-in patterns split and counted in C

_SCAN_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretok_scan.c")
SCAN_PATTERNS = {"gpt4": 0, "gpt2": 1}  # the patterns pretok_scan.c implements (format.PATTERNS names)
_scan_lib = None
_scan_error = None


def _build_scanner():
    from gptlab.tokenizer import unicode_classes

    with open(unicode_classes.__file__, "rb") as f:  # the generator's code is part of the key, as the C file is
        key = hashlib.sha256(f.read()).hexdigest() + unicode_classes.source_digest()
    lib = ctypes.CDLL(_compile([_SCAN_SOURCE], "pretok_scan", key,
                               generated=lambda: {"pretok_tables.h": unicode_classes.header_text()}))
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.pt_new.restype = vp
    lib.pt_new.argtypes = []
    lib.pt_free.argtypes = [vp]
    lib.pt_scan.restype = ctypes.c_int
    lib.pt_scan.argtypes = [vp, ctypes.c_char_p, vp, i64, ctypes.c_int]
    lib.pt_add.restype = ctypes.c_int
    lib.pt_add.argtypes = [vp, ctypes.c_char_p, vp, vp, i64]
    lib.pt_entries.restype = i64
    lib.pt_entries.argtypes = [vp]
    lib.pt_key_bytes.restype = i64
    lib.pt_key_bytes.argtypes = [vp]
    lib.pt_export.argtypes = [vp, vp, vp, vp]
    lib.pt_split.restype = i64
    lib.pt_split.argtypes = [ctypes.c_char_p, i64, ctypes.c_int, vp, i64]
    return lib


def scanner_available():
    """True when pretok_scan.c could be built and loaded (the reason is kept for `scanner_unavailable_reason`)."""
    global _scan_lib, _scan_error
    if _scan_lib is None and _scan_error is None:
        try:
            _scan_lib = _build_scanner()
        except OSError as err:
            _scan_error = str(err)
    return _scan_lib is not None


def scanner_unavailable_reason():
    scanner_available()
    return _scan_error


def _address(arr):
    return arr.buffer_info()[0]


def native_split(text, pattern_name):
    """text → its pre-tokens (str), as regex.findall(PATTERNS[pattern_name], text) gives them (the fuzz test's
    view of the scanner). `text` must hold no lone surrogates (pretokenize.clean_document)."""
    from array import array

    if not scanner_available():
        raise RuntimeError(f"the native pre-tokenizer is unavailable: {_scan_error}")
    data = text.encode("utf-8")
    ends = array("q", [0]) * (len(data) + 1)
    n = _scan_lib.pt_split(data, len(data), SCAN_PATTERNS[pattern_name], _address(ends), len(ends))
    out, start = [], 0
    for end in ends[:n]:
        out.append(data[start:end].decode("utf-8"))
        start = end
    return out


class NativeCounter:
    """A (pre-token bytes → count) table in C: `scan` splits and counts UTF-8 documents, `add` sums an exported
    table in, `export` gives (keys end to end, lengths, counts) to send between processes, `into_dict` the table as
    the regex path builds it. Counts are 64-bit (2**63 occurrences of one pre-token would need exabytes)."""

    def __init__(self, pattern_name):
        if not scanner_available():
            raise RuntimeError(f"the native pre-tokenizer is unavailable: {_scan_error}")
        self.pattern = SCAN_PATTERNS[pattern_name]
        self.handle = _scan_lib.pt_new()
        if not self.handle:
            raise MemoryError("the native pre-tokenizer ran out of memory")

    def close(self):
        if self.handle:
            _scan_lib.pt_free(self.handle)
            self.handle = None

    def __del__(self):
        self.close()

    def scan(self, encoded_docs):
        """Count the pre-tokens of documents given as UTF-8 bytes (each split on its own)."""
        from array import array

        lens = array("q", map(len, encoded_docs))
        if _scan_lib.pt_scan(self.handle, b"".join(encoded_docs), _address(lens), len(lens), self.pattern):
            raise MemoryError("the native pre-tokenizer ran out of memory")

    def add(self, exported):
        keys, lens, counts = exported
        if _scan_lib.pt_add(self.handle, keys, _address(lens), _address(counts), len(lens)):
            raise MemoryError("the native pre-tokenizer ran out of memory")

    def export(self):
        from array import array

        n = _scan_lib.pt_entries(self.handle)
        keys = bytearray(_scan_lib.pt_key_bytes(self.handle))
        lens, counts = array("q", [0]) * n, array("q", [0]) * n
        key_buf = (ctypes.c_char * len(keys)).from_buffer(keys) if keys else None
        _scan_lib.pt_export(self.handle, key_buf, _address(lens), _address(counts))
        return bytes(keys), lens, counts

    def into_dict(self):
        """The table as {pre-token bytes: count}; frees the C table first (this counter is closed after)."""
        keys, lens, counts = self.export()
        self.close()
        table, start = {}, 0
        for length, count in zip(lens, counts):
            table[keys[start:start + length]] = count
            start += length
        return table

# ===== gptlab/tokenizer/pretok_scan.c =====
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

# ===== gptlab/tokenizer/pretokenize.py =====
"""Pre-tokenization: a stream of documents → deduplicated {pre-token bytes: count}, in parallel, in bounded memory.

Each document is split on its own (so nothing spans two documents), and only the table of distinct pre-tokens
with their counts is kept; raw text is never held whole. The parent process reads documents and hands chunks of
about `chunk_chars` characters to `workers` processes through a bounded queue; each worker keeps its own table
and returns it once at the end, so the parent merges only `workers` tables.

Two splitters give the same table: "native" (the built-in patterns gpt4 and gpt2 scanned and counted in C,
native.NativeCounter: chunks travel as UTF-8 bytes, tables as packed arrays; ~10x faster) and "regex"
(`Counter.update` over `regex.findall`, any pattern). "auto" picks native for a built-in pattern when the C
scanner compiled (see resolve_pretokenizer).

Lone surrogates (possible in JSON text) are replaced with U+FFFD before splitting, as tiktoken does when
encoding, so the trainer sees the same text the tokenizer will later encode.

`regex` is imported by the functions that split text: train_tokenizer.py --help imports this module (through
gptlab.tokenizer.job) and should not pay for it.
"""
import functools
import itertools
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import sys
from collections import Counter

from gptlab.core.errors import UserError
from gptlab.core.processes import die_with_parent
from gptlab.tokenizer import native
from gptlab.tokenizer.format import PATTERNS

PRETOKENIZERS = ("auto", "native", "regex")

DEFAULT_CHUNK_CHARS = 1 << 20
PARENT_POLL_S = 2.0  # how often a waiting worker checks that its parent is alive
SPLIT_TIMEOUT_S = 10.0  # a user pattern may take this long per document, plus SPLIT_S_PER_CHAR per character:
SPLIT_S_PER_CHAR = 1e-5  # ~100x the time gpt4 takes with regex (10 MB/s), so only a runaway pattern reaches it


def clean_document(doc):
    """Text as tiktoken encodes it: lone surrogates become U+FFFD."""
    try:
        doc.encode("utf-8")
        return doc
    except UnicodeEncodeError:
        return doc.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def count_documents(docs, pattern):
    """Single-process reference path: {pre-token str: count} of an iterable of documents."""
    import regex  # ~10 ms: see the module docstring

    split = splitter(regex.compile(pattern), pattern_timeout(pattern))
    counter = Counter()
    for doc in docs:
        counter.update(split(clean_document(doc)))
    return counter


class _RegexCount:
    """A worker's table on the regex path: {pre-token str: count}."""

    def __init__(self, pattern, timeout_s):
        import regex  # ~10 ms: see the module docstring

        self.split = splitter(regex.compile(pattern), timeout_s)
        self.counter = Counter()

    def add(self, docs):
        self.counter.update(itertools.chain.from_iterable(map(self.split, docs)))

    def result(self):
        return dict(self.counter)


class _NativeCount:
    """A worker's table on the native path: a C table, sent back packed (NativeCounter.export)."""

    def __init__(self, pattern_name):
        self.counter = native.NativeCounter(pattern_name)

    def add(self, docs):
        self.counter.scan(docs)

    def result(self):
        exported = self.counter.export()
        self.counter.close()  # before the packed copy is pickled or merged: one table at a time
        return exported


def _worker(make_count, tasks, results, parent_pid=None):
    if parent_pid is not None:  # end with the parent, instead of waiting forever on a queue nobody fills; where
        die_with_parent(parent_pid, signal.SIGKILL)  # prctl is missing, the wait below also checks the parent
    # Ctrl-C reaches the whole process group: the parent handles it (and terminates us), so no traceback here;
    # SIGTERM (the parent's terminate()) ends us at once, whatever handler the parent had when it forked us
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    count = make_count()
    while True:
        try:
            docs = tasks.get(timeout=PARENT_POLL_S)
        except queue_mod.Empty:
            if parent_pid is not None and os.getppid() != parent_pid:
                os._exit(1)  # orphaned: nobody will read our table
            continue
        if docs is None:
            break
        try:
            count.add(docs)
        except UserError as err:
            results.put(err)
            return
    results.put(count.result())


def splitter(compiled, timeout_s=None):
    """doc → its pre-tokens (compiled.findall). With timeout_s (a user's pattern), a document that takes longer
    than timeout_s + SPLIT_S_PER_CHAR per character is a UserError naming the pattern, not an endless hang: a
    pattern can backtrack catastrophically on some text. The built-in patterns pass None: regex's timeout check
    makes findall 2-3x slower (0.27 s → 0.83 s for 10 MB of FineWeb-Edu with gpt4), and they cannot backtrack
    that way (possessive quantifiers, no nested repetition)."""
    findall = compiled.findall
    if timeout_s is None:
        return findall

    def split(doc):
        limit = timeout_s + SPLIT_S_PER_CHAR * len(doc)
        try:
            return findall(doc, timeout=limit)
        except TimeoutError:
            raise UserError(f"the pre-tokenization pattern {compiled.pattern!r} took over {limit:.0f} s to split "
                            f"one document of {len(doc):,} characters (catastrophic backtracking: nested "
                            "repetition such as (a+)+ or (\\w|\\w\\w)+); rewrite it with possessive quantifiers "
                            "(++, *+) or atomic groups, or use --pattern gpt4 / gpt2") from None

    return split


def pattern_timeout(pattern):
    """The per-document time limit for splitting with `pattern`: None (no limit, full speed) for the built-in
    patterns, SPLIT_TIMEOUT_S for any other."""
    return None if pattern in PATTERNS.values() else SPLIT_TIMEOUT_S


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


def _encode_clean(docs):
    """The documents as UTF-8 bytes (what the native scanner reads), lone surrogates replaced as clean_document
    does."""
    out = []
    for doc in docs:
        try:
            out.append(doc.encode("utf-8"))
        except UnicodeEncodeError:
            out.append(clean_document(doc).encode("utf-8"))
    return out


def resolve_pretokenizer(pattern, choice="auto"):
    """The splitter for `pattern` (a pattern string): "native" or "regex". auto: native for a built-in pattern
    (format.PATTERNS) when the C scanner compiled, else regex; native where it cannot run is a UserError."""
    if choice not in PRETOKENIZERS:
        raise UserError(f"--pretokenizer {choice!r} is not one of {', '.join(PRETOKENIZERS)}")
    if choice == "regex":
        return "regex"
    name = native_pattern_name(pattern)
    if choice == "native":
        if name is None:
            raise UserError("--pretokenizer native splits only the built-in patterns (--pattern gpt4 or gpt2); "
                            "use --pretokenizer regex (or auto) for a custom --pattern")
        if not native.scanner_available():
            raise UserError(f"--pretokenizer native is unavailable ({native.scanner_unavailable_reason()}); "
                            "install a C compiler or use --pretokenizer regex")
    return "native" if name is not None and native.scanner_available() else "regex"


def native_pattern_name(pattern):
    """The name of `pattern` among the patterns the C scanner implements, or None."""
    return next((name for name in native.SCAN_PATTERNS if PATTERNS[name] == pattern), None)


def pretokenize(docs, pattern, workers=1, chunk_chars=DEFAULT_CHUNK_CHARS, progress=None, pretokenizer="auto"):
    """Iterable of documents → ({pre-token bytes: count}, characters, documents).

    `progress(n_chars)` is called as text is handed out. `workers` <= 1 counts in this process (no start-up cost).
    pretokenizer: auto, native or regex (resolve_pretokenizer); every choice gives the same table.
    """
    use_native = resolve_pretokenizer(pattern, pretokenizer) == "native"
    prepare = _encode_clean if use_native else _check_clean
    if use_native:
        make_count = functools.partial(_NativeCount, native_pattern_name(pattern))
    else:
        make_count = functools.partial(_RegexCount, pattern, pattern_timeout(pattern))
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
                yield prepare(batch)
                if progress is not None:
                    progress(size)
                batch, size = [], 0
        if batch:
            chars += size
            yield prepare(batch)
            if progress is not None:
                progress(size)

    if workers <= 1:
        count = make_count()
        for batch in chunks():
            count.add(batch)
        tables = [count.result()]
    else:
        tables = _run_workers(chunks(), make_count, workers)
    if use_native:
        total = native.NativeCounter(native_pattern_name(pattern))
        while tables:
            total.add(tables.pop())  # each packed table is freed once added
        return total.into_dict(), chars, n_docs
    tables.sort(key=len, reverse=True)
    total = Counter(tables[0])
    for table in tables[1:]:
        total.update(table)
    return to_bytes_table(total), chars, n_docs


def _run_workers(chunks, make_count, workers):
    """Hand `chunks` to `workers` processes running make_count(); their tables (count.result()), in order of
    arrival."""
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    tasks = ctx.Queue(maxsize=2 * workers)
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(make_count, tasks, results, os.getpid()), daemon=True)
             for _ in range(workers)]
    for proc in procs:
        proc.start()
    try:
        for batch in chunks:
            _put(tasks, batch, procs)
        for _ in procs:
            _put(tasks, None, procs)
        tables = []
        for _ in procs:
            table = _get(results, procs)
            if isinstance(table, UserError):  # a worker's pattern timed out
                raise table
            tables.append(table)
    except BaseException:
        # Ctrl-C or a dead worker: stop the workers and do not let the queues' feeder threads wait at exit for
        # pipes nobody reads any more (that would hang the process forever)
        for queue in (tasks, results):
            queue.cancel_join_thread()
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        raise
    for proc in procs:
        proc.join()
    return tables


def _alive_or_raise(procs):
    dead = [p for p in procs if p.exitcode not in (None, 0)]
    if dead:
        raise UserError(f"a pre-tokenization worker died (exit code {dead[0].exitcode}: killed, often for lack "
                        "of memory); try fewer --workers or a smaller --samples")


def _put(queue, item, procs):
    while True:
        try:
            queue.put(item, timeout=1.0)
            return
        except queue_mod.Full:
            _alive_or_raise(procs)


def _get(queue, procs):
    while True:
        try:
            return queue.get(timeout=1.0)
        except queue_mod.Empty:
            _alive_or_raise(procs)

# ===== gptlab/tokenizer/unicode_classes.py =====
"""Character classes for the native pre-tokenizer (pretok_scan.c), written as a C header at build time.

The classes are read from the `regex` module itself, not from `unicodedata`: exactness to `regex.findall` is the
contract, and `regex` carries its own Unicode tables, which can be newer than the interpreter's (regex 2026.5.9
and Python 3.11's unicodedata 14.0 disagree on 13,916 letters and 133 numbers added after Unicode 14). Each class
is found by running the very class of the pattern (`\\p{L}`, `\\p{N}`, `\\s`, `(?i:s)`, ...) over one string
holding every code point, so the header follows whatever `regex` is installed; native.py keys the compiled
library by regex's version.

Layout: a two-stage table, CLASS_STAGE1[cp >> 8] → block, CLASS_STAGE2[block * 256 + (cp & 255)] → class bits
(1 letter, 2 number, 4 White_Space as regex's \\s), and the characters that `(?i:x)` matches for each letter x of
the gpt4 contractions ('s 'd 'm 't 'll 've 're) as a switch.
"""
import hashlib

L_BIT, N_BIT, W_BIT = 1, 2, 4
FOLD_LETTERS = "sdmtlver"
MAX_CP = 0x110000


def class_bytes():
    """bytearray of MAX_CP class-bit bytes, and {code point: folded letter} for the contractions."""
    import regex

    every = "".join(map(chr, range(MAX_CP)))  # lone surrogates included: regex handles them, they never match
    classes = bytearray(MAX_CP)
    for bit, pattern in ((L_BIT, r"\p{L}+"), (N_BIT, r"\p{N}+"), (W_BIT, r"\s+")):
        for m in regex.finditer(pattern, every):
            for cp in range(m.start(), m.end()):
                classes[cp] |= bit
    folds = {}
    for letter in FOLD_LETTERS:
        for m in regex.finditer(f"(?i:{letter})", every):
            if m.end() - m.start() != 1 or m.start() in folds:
                raise RuntimeError(f"regex's (?i:{letter}) matched {m.group()!r}: the scanner cannot follow it")
            folds[m.start()] = letter
    return classes, folds


def header_text():
    """The C header (pretok_tables.h) for the installed `regex`."""
    import regex

    classes, folds = class_bytes()
    blocks, stage1 = {}, []
    for hi in range(MAX_CP >> 8):
        block = bytes(classes[hi << 8:(hi + 1) << 8])
        stage1.append(blocks.setdefault(block, len(blocks)))
    lines = [f"/* generated by gptlab/tokenizer/unicode_classes.py from regex {regex.__version__}; do not edit */",
             f"#define CLASS_L {L_BIT}", f"#define CLASS_N {N_BIT}", f"#define CLASS_W {W_BIT}",
             f"static const uint16_t CLASS_STAGE1[{len(stage1)}] = {{"]
    lines += [",".join(map(str, stage1[k:k + 32])) + "," for k in range(0, len(stage1), 32)]
    lines.append("};")
    stage2 = b"".join(blocks)  # dicts keep insertion order: block k is the k-th distinct one
    lines.append(f"static const uint8_t CLASS_STAGE2[{len(stage2)}] = {{")
    lines += [",".join(map(str, stage2[k:k + 64])) + "," for k in range(0, len(stage2), 64)]
    lines.append("};")
    lines.append("static inline int fold_letter(uint32_t cp) {\n    switch (cp) {")
    lines += [f"    case {cp}: return '{letter}';" for cp, letter in sorted(folds.items())]
    lines.append("    default: return 0;\n    }\n}")
    return "\n".join(lines) + "\n"


def source_digest():
    """What the generated header depends on besides this file: the regex version (its Unicode tables)."""
    import regex

    return hashlib.sha256(str(regex.__version__).encode()).hexdigest()[:8]
