"""The tokenizer file: one owner for its format, its safe loading and its naming.

A tokenizer is a pickle of plain Python values (str, bytes, int, float, bool, None, list, tuple, dict):

    format="gptlab-tokenizer", format_version=1,
    pat_str, pattern_name, mergeable_ranks {bytes: id}, special_tokens {str: id}, merges [[left_id, right_id], ...],
    vocabsize (merges + 256, excluding special tokens), metadata {...},
    script_sha256 + script_commit (the trainer's source: its sha256 and the git commit it was at, "-dirty" when the
    checkout had changes); the source itself is stored once beside the file, by that hash, in .code/<sha256>.txt
    (script_store_path), not in every pickle. A pickle from before carries it whole as script_content.

gpt-lab's older pickles ({pat_str, mergeable_ranks, script_content}, `<|endoftext|>` = len(mergeable_ranks)) load too.

Loading never executes code: the unpickler refuses every global, so a pickle that carries anything but plain
values (a class, a function, `os.system`, ...) is rejected.

Pretrained tokenizers (GPT-2's files, a byte-level tokenizer.json, a tiktoken file: pretrained.py) load too,
converted with their ids unchanged; they have no merge list (their byte tokens are not ids 0-255), and
metadata["document_token"] names the special token before every document (default <|endoftext|>; Llama 3's
<|begin_of_text|>), which is what eot_id and every Encoding's eot_token give.

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
from gptlab.tokenizer.constants import EOT, MAX_TOKENIZER_BYTES  # noqa: F401 (re-exported)
from gptlab.tokenizer.pretrained import convert

TOKENIZER_DIR = "tokenizers"
FORMAT_NAME = "gptlab-tokenizer"
FORMAT_VERSION = 1

# GPT-4 (cl100k) split pattern, as used by minbpe / nanochat / gpt-lab, and the GPT-2 pattern.
PATTERNS = {
    "gpt4": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+""",
    "gpt2": r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
}

MAX_VOCAB = 2**31 - 2  # ids are stored as int32 in the trainer and at least uint16/uint32 in shards
# the least one merge adds to the pickle (protocol 4): its token in mergeable_ranks (SHORT_BINBYTES 1 + length 1 +
# 2 bytes, MEMOIZE 1, its id as BININT1 2 at least), its pair in merges (EMPTY_LIST, MEMOIZE, MARK, two BININT1 2
# each, APPENDS: 8) and its count in metadata["merge_counts"] (BININT1 2)
MIN_BYTES_PER_MERGE = 17


def split_pattern_problem(pat):
    """None when `pat` can split text (compiles with `regex`, never matches the empty string and is in the class
    pattern_check accepts: no catastrophic backtracking whatever the text), else ("invalid", error),
    ("empty", why), ("slow", why) or ("unsupported", why)."""
    import regex  # ~10 ms: see the module docstring

    from gptlab.tokenizer.pattern_check import PatternRefused, check_pattern

    try:
        compiled = regex.compile(pat)
    except regex.error as err:
        return "invalid", err
    if compiled.fullmatch("") is not None:  # the plain case, worded as before
        return "empty", "it matches an empty text"
    if pat in PATTERNS.values():  # checked once by the tests; skips the parse on every load
        return None
    try:
        check_pattern(pat)
    except PatternRefused as refused:
        return refused.args[0], refused.args[1]
    except Exception as err:  # regex's parser is internal API: a version that changed it refuses, never passes
        return "unsupported", f"regex {regex.__version__} parsed it in a way the check does not know ({err!r})"
    return None


def _pattern_problem_text(problem):
    """The words for a split_pattern_problem other than "invalid", after the pattern."""
    kind, why = problem
    if kind == "empty":
        return f"matches the empty string ({why}), so it cannot split text"
    if kind == "slow":
        return f"backtracks catastrophically: {why}"
    return f"cannot be checked for catastrophic backtracking: {why}"


def resolve_pattern(pattern):
    """'gpt4' | 'gpt2' | a regex → (name, pattern string); a regex that does not compile is a UserError."""
    name, pat = (pattern, PATTERNS[pattern]) if pattern in PATTERNS else ("custom", pattern)
    problem = split_pattern_problem(pat)
    if problem and problem[0] == "invalid":
        raise UserError(f"--pattern {pattern!r} is neither gpt4, gpt2 nor a valid regex ({problem[1]})")
    if problem and problem[0] == "empty":
        raise UserError(f"--pattern {pattern!r} {_pattern_problem_text(problem)}; fix the regex")
    if problem:
        raise UserError(f"--pattern {pattern!r} {_pattern_problem_text(problem)}; rewrite it with possessive "
                        "quantifiers (++, *+) or atomic groups, or use gpt4 / gpt2")
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


def script_store_path(tokenizer_path, sha256):
    """Where a trainer's source is kept, once for every tokenizer beside it that it trained."""
    return os.path.join(os.path.dirname(os.path.abspath(tokenizer_path)), ".code", f"{sha256}.txt")


def save_tokenizer(path, *, pat_str, pattern_name, merges, mergeable_ranks, special_tokens, metadata,
                   script_content, script_commit=None, overwrite=False):
    """Write the tokenizer pickle and a readable `<stem>.merges.txt` next to it, both atomically: the text is
    written first and renamed last, so a failed write (a full disk) leaves neither new file. The trainer's source
    (script_content) goes to script_store_path unless that holds it already; the pickle records its sha256 and
    script_commit."""
    script_sha256 = hashlib.sha256(script_content.encode("utf-8")).hexdigest() if script_content else None
    payload = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "pat_str": pat_str,
        "pattern_name": pattern_name,
        "mergeable_ranks": dict(mergeable_ranks),
        "special_tokens": dict(special_tokens),
        "merges": [[int(a), int(b)] for a, b in merges],
        "vocabsize": len(mergeable_ranks),  # 256 + len(merges) when there is a merge list
        "metadata": dict(metadata),
        "script_sha256": script_sha256,
        "script_commit": script_commit,
    }
    check_tokenizer_size(payload)
    merges_path = merges_txt_path(path)
    store = script_store_path(path, script_sha256) if script_sha256 else None
    new_store = store is not None and _stored_script(path, script_sha256) is None  # content-addressed: written once
    store_dir_existed = store is not None and os.path.isdir(os.path.dirname(store))
    try:
        if new_store:
            with atomic_write(store, "w", overwrite=True) as f:
                f.write(script_content)
        with atomic_write(merges_path, "w", overwrite=True) as merges_file:
            merges_file.write(format_merges(merges, mergeable_ranks, metadata.get("merge_counts")))
            merges_file.flush()  # its own write errors surface here, before the pickle replaces anything
            with atomic_write(path, "wb", overwrite=overwrite) as f:
                pickle.dump(payload, f, protocol=4)
    except BaseException:
        if new_store:  # a failed save leaves no new file: nor the trainer's source it stored for this pickle
            for remove, target in ((os.remove, store), (os.rmdir, os.path.dirname(store))):
                if remove is os.rmdir and store_dir_existed:
                    break
                try:
                    remove(target)
                except OSError:
                    pass
        raise
    return path


class _ByteCount:
    """A file that only counts what is written to it."""

    def __init__(self):
        self.size = 0

    def write(self, data):
        self.size += memoryview(data).nbytes
        return memoryview(data).nbytes


def check_tokenizer_size(payload):
    """Refuse (UserError) a tokenizer whose pickle would exceed MAX_TOKENIZER_BYTES, the most the loader reads:
    every file the trainer writes loads. Counted without building the pickle in memory, before anything is
    written."""
    counter = _ByteCount()
    pickle.Pickler(counter, protocol=4).dump(payload)
    if counter.size <= MAX_TOKENIZER_BYTES:
        return
    merges = len(payload["merges"])
    fixed = counter.size - _merges_bytes(payload)
    fits = 256 + int(merges * max(MAX_TOKENIZER_BYTES - fixed, 0) / max(counter.size - fixed, 1))
    raise UserError(f"the tokenizer would be {counter.size / 2**20:,.1f} MiB, over the {MAX_TOKENIZER_BYTES / 2**20:g} "
                    f"MiB that loading a tokenizer reads (its {merges:,} merges make long tokens); nothing was "
                    f"written; train again with a smaller --vocabsize (at most about {fits:,})")


def _merges_bytes(payload):
    """The pickled size of what grows with the merges (ranks, merges, their counts), counted as in the file."""
    counter = _ByteCount()
    pickle.Pickler(counter, protocol=4).dump([payload["mergeable_ranks"], payload["merges"],
                                              payload["metadata"].get("merge_counts") or []])
    return counter.size


def max_trainable_vocab():
    """The largest --vocabsize whose tokenizer file can fit MAX_TOKENIZER_BYTES: each merge takes at least
    MIN_BYTES_PER_MERGE bytes in the pickle, however short its token."""
    return 256 + MAX_TOKENIZER_BYTES // MIN_BYTES_PER_MERGE


def merges_txt_path(pkl_path):
    return os.path.splitext(pkl_path)[0] + ".merges.txt"


def format_merges(merges, mergeable_ranks, counts=None):
    """One line per merge: rank, left part, right part, new token, count (bytes shown as Python literals). Without
    a merge list (a converted tokenizer), one line per token: id, token."""
    if not merges:
        by_id = sorted((rank, token) for token, rank in mergeable_ranks.items())
        return "\n".join(["# id\ttoken"] + [f"{rank}\t{token!r}" for rank, token in by_id]) + "\n"
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
                        "file (e.g. tokenizers/NAME_vVOCAB_nSAMPLES.pkl) or its name inside tokenizers/, or a folder "
                        "holding GPT-2's vocab.bpe + encoder.json, a tokenizer.json or a tokenizer.model")
    have = sorted(os.path.basename(p) for p in glob.glob(os.path.join(tokenizer_dir, "*.pkl")))
    where = os.path.abspath(tokenizer_dir)  # relative to the current folder: say which one was searched
    hint = f"available in {where}/: {', '.join(have)}" if have else f"{where}/ has no tokenizers yet"
    raise UserError(f"tokenizer {name_or_path!r} not found ({hint}); train one with train_tokenizer.py")


def read_tokenizer_file(name_or_path, tokenizer_dir=TOKENIZER_DIR):
    """The tokenizer's dict, checked and normalised to the current format (old gpt-lab pickles get defaults; a
    pretrained tokenizer's files are converted: gptlab.tokenizer.pretrained)."""
    for candidate in (name_or_path, os.path.join(tokenizer_dir, name_or_path)):
        if candidate == name_or_path or os.path.exists(candidate):
            converted = convert(candidate)
            if converted is not None:
                check_tokenizer_dict(converted, candidate, fix="download it again")
                return converted
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
    out["name"] = os.path.splitext(os.path.basename(path))[0]
    return out


def _is_id(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_VOCAB


def check_tokenizer_dict(data, source, fix="retrain it with train_tokenizer.py"):
    """What tiktoken needs, checked up front so a damaged file is one UserError (naming `source` and `fix`), never a
    panic."""
    def damaged(problem):
        return UserError(f"{source} is damaged: {problem}; {fix}")

    pat_str = data["pat_str"]
    if not isinstance(pat_str, str):
        raise damaged(f"pat_str is a {type(pat_str).__name__}, not a regex string")
    problem = split_pattern_problem(pat_str)
    if problem and problem[0] == "invalid":
        raise damaged(f"pat_str {pat_str[:80]!r} is not a valid regex ({problem[1]})")
    if problem:
        raise damaged(f"pat_str {pat_str[:80]!r} {_pattern_problem_text(problem)}, so encoding could fail or hang")
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
    document = document_token(data)
    if not isinstance(document, str) or (document != EOT and document not in special):
        raise damaged(f"its document token {str(document)[:40]!r} is not one of its special tokens")


def encoding_from_dict(data, name=None):
    """A tiktoken.Encoding from a tokenizer dict (fast encode_ordinary / decode / eot_token / n_vocab).

    What tiktoken still refuses (a regex its engine cannot parse, a Rust panic) is a UserError naming the file."""
    import tiktoken  # ~15 ms: see the module docstring

    source = data.get("path", "the tokenizer")
    name = name or os.path.splitext(os.path.basename(data.get("path", "gptlab")))[0]
    try:
        encoding = tiktoken.Encoding(name=name, pat_str=data["pat_str"], mergeable_ranks=data["mergeable_ranks"],
                                     special_tokens=data["special_tokens"])
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # ValueError, or pyo3_runtime.PanicException (a BaseException) from the Rust core
        raise UserError(f"{source}: tiktoken cannot build an encoder from it ({_first_line(err)}); retrain it with "
                        "train_tokenizer.py") from None
    if hasattr(encoding, "_core_bpe"):
        encoding._core_bpe = _GuardedCore(encoding._core_bpe, source)
    document = document_token(data)
    if document != EOT:  # Llama 3's <|begin_of_text|>: what every tool's encoding.eot_token means is that token
        encoding.__class__ = type("DocumentTokenEncoding", (type(encoding),),
                                  {"eot_token": property(lambda self, i=data["special_tokens"][document]: i)})
    return encoding


def _first_line(err):
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:200]}" if text else type(err).__name__


class _GuardedCore:
    """tiktoken's Rust core, whose encoders' failures become one UserError: its regex engine gives up on some
    texts (BacktrackLimitExceeded, StackOverflow on a run of ~10**6 spaces even with gpt2's pattern) and the
    binding then panics (pyo3_runtime.PanicException, a BaseException). Every Encoding method that splits text
    calls one of these."""

    ENCODERS = frozenset({"encode", "encode_ordinary", "encode_to_tiktoken_buffer", "encode_with_unstable",
                          "_encode_bytes"})

    def __init__(self, core, source):
        self._core, self._source = core, source

    def __getattr__(self, name):
        attr = getattr(self._core, name)
        if name not in self.ENCODERS:
            return attr

        def guarded(*args, **kwargs):
            try:
                return attr(*args, **kwargs)
            except (KeyboardInterrupt, SystemExit, UnicodeError):  # tiktoken retries a UnicodeEncodeError itself
                raise
            except BaseException as err:
                size = f"{len(args[0]):,}-character " if args and isinstance(args[0], (str, bytes)) else ""
                raise UserError(f"{self._source}: tiktoken failed to split a {size}text with this tokenizer's "
                                f"pattern ({_first_line(err)}): its regex engine gives up on some long runs of "
                                "similar characters; split or shorten that document, or retrain the tokenizer with a "
                                "--pattern whose repetitions are possessive (++, *+)") from None

        return guarded


def load_tokenizer(name_or_path, tokenizer_dir=TOKENIZER_DIR):
    """The project's one loader: name or path → tiktoken.Encoding."""
    return encoding_from_dict(read_tokenizer_file(name_or_path, tokenizer_dir))


def eot_id(data):
    """The id of a tokenizer dict's document token (`<|endoftext|>`; Llama 3's `<|begin_of_text|>`)."""
    document = document_token(data)
    if document not in data["special_tokens"]:
        raise UserError(f"{data.get('path', 'tokenizer')} has no {document} special token, which documents need")
    return data["special_tokens"][document]


def document_token(data):
    """The special token before every document: metadata["document_token"], else <|endoftext|>."""
    metadata = data.get("metadata")
    return metadata.get("document_token", EOT) if isinstance(metadata, dict) else EOT


@dataclass(frozen=True)
class LoadedTokenizer:
    """A tokenizer file, loaded and checked: its Encoding and what a training run records about it."""
    encoding: "tiktoken.Encoding"  # noqa: F821 (tiktoken is imported lazily)
    eot: int  # the <|endoftext|> id: documents start with it
    name: str  # the file's stem, e.g. quickstart_v1000_n400000: the shard folders' suffix
    path: str
    ranks_sha256: str  # identifies the merges, whatever the file is called
    train_script: str  # the trainer's source (training_script)

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


def _stored_script(tokenizer_path, sha256):
    """The stored trainer source of this sha256 beside a tokenizer, or None (absent, unreadable, or not that text)."""
    try:
        with open(script_store_path(tokenizer_path, sha256), encoding="utf-8") as f:
            text = f.read()
    except (OSError, ValueError):
        return None
    return text if hashlib.sha256(text.encode("utf-8")).hexdigest() == sha256 else None


def training_script(data):
    """The source that trained a tokenizer (read_tokenizer_file's dict): carried whole by an older pickle, else
    stored beside it by its sha256 (checked), else one comment line naming its sha256 and commit."""
    if data.get("script_content"):
        return data["script_content"]
    sha256, commit = data.get("script_sha256"), data.get("script_commit")
    if not isinstance(sha256, str):
        return ""
    stored = _stored_script(data["path"], sha256)
    if stored is not None:
        return stored
    return (f"# the tokenizer's training script (sha256 {sha256}, git commit {commit or 'unknown'}) is not at "
            f"{script_store_path(data['path'], sha256)}\n")


def open_tokenizer(name_or_path, tokenizer_dir=TOKENIZER_DIR):
    """A name (in tokenizers/) or path → LoadedTokenizer; every problem with the file is one UserError."""
    data = read_tokenizer_file(name_or_path, tokenizer_dir)
    return LoadedTokenizer(encoding=encoding_from_dict(data), eot=eot_id(data),
                           name=data["name"], path=data["path"],
                           ranks_sha256=ranks_sha256(data["mergeable_ranks"]), train_script=training_script(data))
