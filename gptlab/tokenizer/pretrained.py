"""Pretrained tokenizers as our tokenizer format, every id unchanged.

Sources (`--tokenizer SOURCE` everywhere, or `train_tokenizer.py --from_pretrained SOURCE` to write the .pkl once):

- GPT-2's release: `vocab.bpe` (the merges) + `encoder.json` (token → id); either file's path (the other one lies
  beside it) or a folder holding both. Split pattern: GPT-2's (tiktoken's r50k spelling); `<|endoftext|>` is 50256.
- a Hugging Face `tokenizer.json` of a byte-level BPE (model.type BPE, a ByteLevel pre-tokenizer, no normalizer),
  or a folder holding one. Split pattern: its Split pre-tokenizer's regex, else (ByteLevel's own regex) GPT-2's;
  special tokens: its added tokens.
- a tiktoken file (`base64token rank` lines, as Llama 3's `tokenizer.model`), or a folder holding
  `tokenizer.model`: read as Meta's Llama 3 tokenizer.py reads it, with Llama 3's split pattern and its 256 special
  tokens from id len(ranks) on (`<|begin_of_text|>` first).
- `hf:ORG/NAME[@REVISION]`: that Hub repository's tokenizer.json, through huggingface_hub (HF_ENDPOINT, HF_TOKEN,
  HF_HUB_OFFLINE and the cache as for every download).

Encoding is tiktoken's everywhere (rank order: the adjacent pair whose concatenation has the lowest id merges
first). A merge list gives the same ids only if its merges make tokens in id order and every token is made by one:
both are checked, so a merges file of another vocabulary is refused rather than encoding differently.
The dict has no merge list (its byte tokens are not ids 0-255); readers recover the merges from the ranks.
"""
import base64
import binascii
import json
import os

from gptlab.core.errors import UserError, escape_controls
from gptlab.tokenizer.constants import EOT, MAX_TOKENIZER_BYTES

# tiktoken's r50k_base pattern: GPT-2's `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
# with possessive repetitions (same splits, no deep backtracking)
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
# Meta's llama3/tokenizer.py pat_str
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_DOCUMENT_TOKEN = "<|begin_of_text|>"  # Llama 3's documents start with it, as ours with <|endoftext|>
HUB_PREFIX = "hf:"
GPT2_FILES = ("vocab.bpe", "encoder.json")
FOLDER_FILES = ("tokenizer.json", "tokenizer.model")  # what a folder may hold besides GPT-2's two files
FORMATS_HINT = ("a .pkl written by train_tokenizer.py, GPT-2's vocab.bpe/encoder.json, a byte-level BPE "
                "tokenizer.json, a tiktoken file (Llama 3's tokenizer.model) or hf:ORG/NAME")


def llama3_special_tokens(n_ranks):
    """Meta's Llama 3 special tokens, numbered from n_ranks on (256 of them)."""
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
             "<|reserved_special_token_2|>", "<|reserved_special_token_3|>", "<|start_header_id|>",
             "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]
    names += [f"<|reserved_special_token_{i}|>" for i in range(5, 256 - 5)]
    return {name: n_ranks + i for i, name in enumerate(names)}


def byte_alphabet():
    """GPT-2's byte-level alphabet, character → byte: printable Latin-1 stands for itself, every other byte for
    chr(256 + n) in byte order."""
    printable = [b for b in range(256) if chr(b).isprintable() and b != ord(" ")]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(others)}}


# ------------------------------------------------------------------------------------------------ which source


def pretrained_source(name_or_path):
    """(kind, path) when `name_or_path` names a pretrained source ('gpt2', 'hf-json', 'tiktoken', 'hub'), else
    None (a pickle, or nothing there: the .pkl loader reports it)."""
    if name_or_path.startswith(HUB_PREFIX):
        return "hub", name_or_path[len(HUB_PREFIX):]
    if os.path.isdir(name_or_path):
        held = [f for f in GPT2_FILES + FOLDER_FILES if os.path.isfile(os.path.join(name_or_path, f))]
        if all(f in held for f in GPT2_FILES):
            return "gpt2", name_or_path
        for name, kind in (("tokenizer.json", "hf-json"), ("tokenizer.model", "tiktoken")):
            if name in held:
                return kind, os.path.join(name_or_path, name)
        return None  # the .pkl loader words it
    if not os.path.isfile(name_or_path):
        return None
    head = _read(name_or_path, limit=64)
    if head.startswith(b"\x80"):  # a pickle (protocol 2+): ours
        return None
    text = head.lstrip()
    if os.path.basename(name_or_path) in GPT2_FILES or text.startswith(b"#version"):
        return "gpt2", name_or_path
    if text.startswith(b"{"):  # GPT-2's encoder.json is a flat {token: id}; tokenizer.json has a "model"
        beside = os.path.join(os.path.dirname(name_or_path), "vocab.bpe")
        return ("gpt2" if os.path.isfile(beside) and not _is_tokenizer_json(name_or_path) else "hf-json"), name_or_path
    first_line = text.split(b"\n", 1)[0].split()
    if len(first_line) == 2 and first_line[1].isdigit():
        return "tiktoken", name_or_path
    # a protobuf starting with field 1 (a SentencePiece model, as Llama 1/2's tokenizer.model and Mistral's)
    looks = " (it looks like a SentencePiece model, which is not byte-level BPE)" if head[:1] == b"\n" else ""
    raise UserError(f"{name_or_path} is not a tokenizer: not a pickle file at all, nor any tokenizer format known "
                    f"here{looks}; pass {FORMATS_HINT}")


def _is_tokenizer_json(path):
    try:
        spec = _json(path)
        return isinstance(spec, dict) and "model" in spec
    except UserError:
        return True  # its own reader words the problem


def source_name(kind, path):
    """The converted tokenizer's name (shard folders, run records): the file's stem, or its folder's name for the
    usual file names (gpt2/vocab.bpe → gpt2), or the Hub repository's name."""
    if kind == "hub":
        return path.split("@")[0].rstrip("/").split("/")[-1]
    path = os.path.abspath(path)
    if os.path.isdir(path) or os.path.basename(path) in GPT2_FILES + FOLDER_FILES:
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        return os.path.basename(folder) or "tokenizer"
    return os.path.splitext(os.path.basename(path))[0]


# ------------------------------------------------------------------------------------------------ reading


def _read(path, limit=MAX_TOKENIZER_BYTES):
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as err:
        raise UserError(f"tokenizer {path} is not readable ({err.strerror or err}); check its permissions "
                        "(chmod a+r)") from None
    if len(data) > limit and limit == MAX_TOKENIZER_BYTES:
        raise UserError(f"{path} is larger than {MAX_TOKENIZER_BYTES // 2**20} MiB, far more than any tokenizer; it "
                        "is not a tokenizer file")
    return data[:limit]


def _json(path):
    try:
        return json.loads(_read(path).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise UserError(f"{path} is not valid JSON ({escape_controls(err)}): truncated or damaged; download it "
                        "again") from None


def convert(name_or_path):
    """The tokenizer dict (format.read_tokenizer_file's fields) of a pretrained source, or None when it is not
    one. Every problem with the source is one UserError naming the file and the fix."""
    found = pretrained_source(name_or_path)
    if found is None:
        return None
    kind, path = found
    if kind == "hub":
        path = _hub_tokenizer_json(path)
        kind = "hf-json"
    if kind == "gpt2":
        data = _from_gpt2_files(path)
    elif kind == "hf-json":
        data = _from_tokenizer_json(path)
    else:
        data = _from_tiktoken_file(path)
    data["name"] = source_name(*found)
    data["path"] = name_or_path
    where = found[1] if found[0] == "hub" else os.path.abspath(found[1])
    data["metadata"]["source"] = {"kind": found[0], "path": where}
    return data


def _dict(pat_str, pattern_name, ranks, special_tokens, source, document_token=EOT):
    return {"format": "gptlab-tokenizer", "format_version": 1, "pat_str": pat_str, "pattern_name": pattern_name,
            "mergeable_ranks": ranks, "special_tokens": special_tokens, "merges": [], "vocabsize": len(ranks),
            "metadata": {"document_token": document_token},
            "script_content": f"# converted from {source} by gptlab/tokenizer/pretrained.py\n"}


def _gpt2_paths(path):
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    paths = [os.path.join(folder, name) for name in GPT2_FILES]
    for p in paths:
        if not os.path.isfile(p):
            raise UserError(f"{path}: GPT-2's tokenizer needs vocab.bpe and encoder.json side by side, and {p} is "
                            "missing; put both released files in one folder")
    return paths


def _from_gpt2_files(path):
    vocab_bpe, encoder_json = _gpt2_paths(path)
    try:
        lines = _read(vocab_bpe).decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise UserError(f"{vocab_bpe} is not GPT-2's vocab.bpe (not UTF-8 text); download it again") from None
    if not lines[0].startswith("#version"):
        raise UserError(f"{vocab_bpe} is not GPT-2's vocab.bpe (it must start with a '#version' line); download it "
                        "again")
    merges = []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise UserError(f"{vocab_bpe} line {n} is not a merge ('LEFT RIGHT'): {escape_controls(line[:80])!r}; "
                            "the file is damaged, download it again")
        merges.append(parts)
    encoder = _json(encoder_json)
    if not isinstance(encoder, dict) or not all(isinstance(i, int) for i in encoder.values()):
        raise UserError(f"{encoder_json} is not GPT-2's encoder.json (a JSON object of token → id); download it "
                        "again")
    special = {t: i for t, i in encoder.items() if t.startswith("<|") and t.endswith("|>")}
    ranks = _byte_level_ranks(encoder, merges, special, encoder_json, vocab_bpe)
    return _dict(GPT2_PATTERN, "gpt2", ranks, special, f"{vocab_bpe} + {encoder_json}")


def _from_tokenizer_json(path):
    spec = _json(path)
    model = spec.get("model") if isinstance(spec, dict) else None
    if not isinstance(model, dict):
        raise UserError(f"{path} is not a Hugging Face tokenizer.json (it has no \"model\"); give the tokenizer.json "
                        "of a byte-level BPE, or GPT-2's encoder.json with its vocab.bpe beside it")
    kind = model.get("type", "BPE" if "merges" in model else None)
    if kind != "BPE":
        raise UserError(f"{path} is a {kind or 'untyped'} model, not a byte-level BPE: only byte-level BPE "
                        "tokenizers (GPT-2's, Llama 3's) convert with their ids unchanged; train one with "
                        "train_tokenizer.py instead")
    if spec.get("normalizer") or model.get("byte_fallback") or model.get("continuing_subword_prefix") \
            or model.get("end_of_word_suffix"):
        raise UserError(f"{path} normalizes text or marks word pieces (a normalizer, byte_fallback or a subword "
                        "prefix/suffix), which plain byte-level BPE does not do; only byte-level BPE tokenizers "
                        "(GPT-2's, Llama 3's) convert with their ids unchanged")
    pattern = _split_pattern(spec.get("pre_tokenizer"), path)
    vocab, merges = model.get("vocab"), model.get("merges")
    if not isinstance(vocab, dict) or not isinstance(merges, list):
        raise UserError(f"{path}: model.vocab must be an object and model.merges a list; the file is damaged, "
                        "download it again")
    merges = [m.split(" ") if isinstance(m, str) else m for m in merges]
    added = [t for t in spec.get("added_tokens") or [] if isinstance(t, dict)]
    special = {t.get("content"): t.get("id") for t in added}
    if not all(isinstance(t, str) and isinstance(i, int) for t, i in special.items()):
        raise UserError(f"{path}: added_tokens must each have a string content and an integer id; the file is "
                        "damaged, download it again")
    ranks = _byte_level_ranks(vocab, merges, special, path, path)
    name = "gpt2" if pattern == GPT2_PATTERN else "llama3" if pattern == LLAMA3_PATTERN else "custom"
    document = EOT if EOT in special or LLAMA3_DOCUMENT_TOKEN not in special else LLAMA3_DOCUMENT_TOKEN
    return _dict(pattern, name, ranks, special, path, document)


def _split_pattern(pre, path):
    """The regex a tokenizer.json's pre-tokenizer splits with: a Split's (Isolated) before a regex-less ByteLevel,
    or a lone ByteLevel's own (GPT-2's)."""
    steps = pre.get("pretokenizers", []) if isinstance(pre, dict) and pre.get("type") == "Sequence" else [pre]
    types = [s.get("type") if isinstance(s, dict) else None for s in steps]
    refuse = UserError(f"{path}'s pre-tokenizer ({' + '.join(map(str, types))}) is not a byte-level BPE's (a "
                       "ByteLevel, optionally after one Split regex); only byte-level BPE tokenizers (GPT-2's, "
                       "Llama 3's) convert with their ids unchanged")
    if not types or types[-1] != "ByteLevel" or steps[-1].get("add_prefix_space"):
        raise refuse
    byte_level = steps[-1]
    if types == ["ByteLevel"]:
        if byte_level.get("use_regex", True):
            return GPT2_PATTERN
        raise refuse
    if types != ["Split", "ByteLevel"] or byte_level.get("use_regex", True):
        raise refuse
    split = steps[0]
    pattern = (split.get("pattern") or {}).get("Regex")
    if not isinstance(pattern, str) or split.get("behavior") != "Isolated" or split.get("invert"):
        raise refuse
    return pattern


def _byte_level_ranks(vocab, merges, special, vocab_path, merges_path):
    """{token bytes: id} of a byte-level vocabulary (its special tokens left out), checked against its merges:
    they must make every multi-byte token, in id order, for tiktoken's rank order to encode as the merges do."""
    alphabet = byte_alphabet()
    ranks = {}
    for text, i in vocab.items():
        if text in special:
            continue
        try:
            token = bytes(alphabet[c] for c in text)
        except KeyError:
            raise UserError(f"{vocab_path}: vocabulary token {escape_controls(text[:40])!r} is not in GPT-2's "
                            "byte-level alphabet, so this is not a byte-level BPE; only byte-level BPE tokenizers "
                            "convert with their ids unchanged") from None
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise UserError(f"{vocab_path}: token {escape_controls(text[:40])!r} has the id {i!r}; ids are "
                            "integers from 0; the file is damaged, download it again")
        ranks[token] = i
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise UserError(f"{vocab_path} lacks {len(missing)} of the 256 byte tokens (first: {bytes(missing[:1])!r}); "
                        "it is truncated or not a byte-level BPE vocabulary")
    made, last = set(), -1
    for k, pair in enumerate(merges):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise UserError(f"{merges_path}: merge {k} is not a pair of tokens ({str(pair)[:60]}); the file is "
                            "damaged, download it again")
        left, right = (bytes(alphabet[c] for c in p) if all(c in alphabet for c in p) else None
                       for p in pair)
        rank = ranks.get(left + right) if left is not None and right is not None else None
        if rank is None or left not in ranks or right not in ranks:
            raise UserError(f"{merges_path}: merge {k} ({escape_controls(' '.join(pair))!r}) uses or makes a token "
                            f"that {vocab_path} does not hold: the merges and the vocabulary belong to different "
                            "tokenizers (or one is truncated); use the files released together")
        if rank < last:
            raise UserError(f"{merges_path}: merge {k} ({escape_controls(' '.join(pair))!r}) makes id {rank} after a "
                            f"merge made id {last}: the merges are not in the vocabulary's id order, so the ids "
                            "would not be the released tokenizer's; use the files released together")
        made.add(left + right)
        last = rank
    unmade = sorted((i, t) for t, i in ranks.items() if len(t) > 1 and t not in made)
    if unmade:
        i, t = unmade[0]
        raise UserError(f"{vocab_path}: {len(unmade)} multi-byte token(s) no merge of {merges_path} makes (first: "
                        f"{t!r}, id {i}): the merges and the vocabulary belong to different tokenizers (or the "
                        "merges are truncated); use the files released together")
    return ranks


def _from_tiktoken_file(path):
    ranks = {}
    try:
        text = _read(path).decode("ascii")
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a tiktoken file (lines of 'base64token rank', ASCII only); give Llama 3's "
                        f"tokenizer.model or {FORMATS_HINT}") from None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line:
            continue
        parts = line.split()
        try:
            token, rank = base64.b64decode(parts[0], validate=True), int(parts[1])
            if len(parts) != 2 or rank < 0:
                raise ValueError
        except (IndexError, ValueError, binascii.Error):
            raise UserError(f"{path} line {n} is not 'base64token rank' ({escape_controls(line[:60])!r}): the file is "
                            "damaged or truncated; download it again") from None
        if token in ranks:
            raise UserError(f"{path} line {n} repeats the token {token!r}; the file is damaged, download it again")
        ranks[token] = rank
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise UserError(f"{path}: its ranks are not 0..{len(ranks) - 1} each once, so Llama 3's special tokens (from "
                        f"id {len(ranks)}) would collide with them; the file is damaged or truncated, download it "
                        "again")
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise UserError(f"{path} lacks {len(missing)} of the 256 byte tokens (first: {bytes(missing[:1])!r}); it is "
                        "truncated or not a byte-level BPE; download it again")
    return _dict(LLAMA3_PATTERN, "llama3", ranks, llama3_special_tokens(len(ranks)), path, LLAMA3_DOCUMENT_TOKEN)


def _hub_tokenizer_json(spec):
    """hf:ORG/NAME[@REVISION] → the local path of its tokenizer.json (downloaded into the Hub cache)."""
    repo_id, _, revision = spec.partition("@")
    if repo_id.count("/") > 1 or not all(repo_id.split("/")):  # "gpt2" alone is a legacy id the Hub still serves
        raise UserError(f"--tokenizer hf:{spec} must name a Hub repository as hf:ORG/NAME[@REVISION], e.g. "
                        "hf:openai-community/gpt2")
    from huggingface_hub import constants, hf_hub_download  # only for the Hub (it reads HF_* variables)
    from huggingface_hub.errors import (EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    from gptlab.text.sources import describe_error, hub_unreachable, proxy_hint

    revision = revision or None
    cached = f"is not in the HF cache ({constants.HF_HUB_CACHE})"
    if constants.HF_HUB_OFFLINE:
        try:
            return hf_hub_download(repo_id, "tokenizer.json", revision=revision)
        except LocalEntryNotFoundError:
            raise UserError(f"tokenizer.json of {repo_id} {cached} and HF_HUB_OFFLINE is set; run once online, "
                            "unset HF_HUB_OFFLINE, or pass the path of a downloaded tokenizer.json") from None
    problem = hub_unreachable(repo_id, repo_type=None, revision=revision or "main")
    try:  # unreachable: the cached copy, if any, without minutes of retries
        return hf_hub_download(repo_id, "tokenizer.json", revision=revision, local_files_only=bool(problem))
    except LocalEntryNotFoundError:
        why = problem or f"the Hub at {constants.ENDPOINT} did not serve it"
        raise UserError(f"tokenizer.json of {repo_id} {cached}: {why}; {proxy_hint([constants.ENDPOINT])}; "
                        "or pass the path of a downloaded tokenizer.json") from None
    except EntryNotFoundError:
        raise UserError(f"the Hub repository {repo_id} has no tokenizer.json; give its vocab.bpe/encoder.json or "
                        "tiktoken file as a path instead") from None
    except (RepositoryNotFoundError, RevisionNotFoundError) as err:
        raise UserError(f"the Hub has no {repo_id}{'@' + revision if revision else ''} ({type(err).__name__}); "
                        "check the name (and HF_TOKEN for a gated or private repository)") from None
    except Exception as err:  # a proxy, a timeout, an error page
        raise UserError(f"could not fetch tokenizer.json of {repo_id} from {constants.ENDPOINT} "
                        f"({describe_error(err)}); {proxy_hint([constants.ENDPOINT])}, or pass the path of a "
                        "downloaded tokenizer.json") from None
