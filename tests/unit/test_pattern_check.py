"""Split patterns that backtrack catastrophically are refused by their structure, not by probing texts, and every
failure of tiktoken's encoder is one UserError (issue 37, item 5)."""
import pytest

from gptlab.core.errors import UserError
from gptlab.tokenizer.format import PATTERNS, encoding_from_dict, read_tokenizer_file, resolve_pattern, save_tokenizer
from gptlab.tokenizer.pattern_check import check_pattern

BYTE_RANKS = {bytes([i]): i for i in range(256)}

# The published split patterns (tiktoken_ext/openai_public.py, Meta's Llama 3): all must stay accepted.
STANDARD = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "r50k": r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""",
    "cl100k": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|"""
              r"""\s*[\r\n]|\s+(?!\S)|\s""",
    "o200k": "|".join([
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+"""]),
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
              r"""\s*[\r\n]+|\s+(?!\S)|\s+""",
    "project gpt4": PATTERNS["gpt4"], "project gpt2": PATTERNS["gpt2"],
    "letters or one character": r"[A-Za-z]+|[^A-Za-z]", "one range alone": r"[a-z]+|[0-9]+|\s+|.",
    "possessive alternatives": r"(?:x|xy)++|\s+|.", "atomic alternatives": r"(?>x|xy)*z|\s+|.",
}

# Exponential or high-polynomial backtracking, worked out by hand: on a run of the repeated character followed by
# one that makes the match fail, each pattern tries 2**n splits of the run (or n**2 from every position). Several
# blow up only on characters the old probe never tried (Cyrillic, Greek, CJK, '%', '-').
CATASTROPHIC = [
    r"(a+)+b|\s|.", r"(\p{L}+)+(?!\S)|\s|.", r"(x|xy)+z|\s|.", r"(\d+)+!|\s|.", r"(?:[%-]+)+x|\s|.",
    r"(?:ж+)+(?=!)|\s|.", r"(?:\p{Greek}|\p{L})+\d|\s|.", r"(?:漢|漢漢)+$|\s|.", r"(\s+)+\S|.",
    r"(?:\w+\s?)+$|.", r"\p{L}*\p{L}*x|\s|.", r"\d*\d*\d*!|\s|.", r"(a|a){30}b|\s|.", r"(?:a?){25}a{25}|\s|.",
    r"(\w|\w\w)+$|\s|.", r"(?:ж+)+", r"(?:[a-c]|[b-d])+!|\s|.",
]
CYRILLIC_ONLY = r"(?:ж|жж)+(?=!)|\s|."


@pytest.mark.parametrize("name", list(STANDARD))
def test_standard_patterns_are_accepted(name):
    assert resolve_pattern(STANDARD[name]) == ("custom", STANDARD[name])
    assert check_pattern(STANDARD[name]) is None  # also the built-in ones, which loading does not parse


@pytest.mark.parametrize("pattern", CATASTROPHIC + [CYRILLIC_ONLY])
def test_catastrophic_patterns_are_refused_whatever_characters_they_blow_up_on(pattern):
    with pytest.raises(UserError, match="backtracks catastrophically.*possessive"):
        resolve_pattern(pattern)


def test_a_refused_pattern_the_old_probe_passed_really_breaks_tiktoken():
    """The expectation above is not the check's opinion: on 40 Cyrillic letters tiktoken's own engine exceeds its
    backtracking limit (and the binding panics); a run of the characters the old probe tried is harmless."""
    import tiktoken

    enc = tiktoken.Encoding("raw", pat_str=CYRILLIC_ONLY, mergeable_ranks=BYTE_RANKS, special_tokens={})
    assert len(enc.encode_ordinary("a" * 40 + "?")) == 41
    with pytest.raises(BaseException, match="BacktrackLimitExceeded"):
        enc.encode_ordinary("ж" * 40 + "?")
    with pytest.raises(UserError, match="backtracks catastrophically"):
        resolve_pattern(CYRILLIC_ONLY)


@pytest.mark.parametrize("pattern", [r"a|(?=b)", r"\b|\w+", r"\w+|$", r"(?:x|)\s+|x*"])
def test_a_pattern_that_matches_empty_somewhere_is_refused(pattern):
    """tiktoken panics on an empty piece; fullmatch('') misses one that is empty only at some positions."""
    with pytest.raises(UserError, match="matches the empty string"):
        resolve_pattern(pattern)


@pytest.mark.parametrize("pattern", [CYRILLIC_ONLY, r"(x|xy)*z|\s|.", r"a|(?=b)"])
def test_a_stored_pattern_outside_the_class_is_refused_at_load(tmp_path, pattern):
    path = tmp_path / "t.pkl"
    save_tokenizer(str(path), pat_str=pattern, pattern_name="custom", merges=[], mergeable_ranks=BYTE_RANKS,
                   special_tokens={"<|endoftext|>": 256}, metadata={}, script_content="")
    with pytest.raises(UserError, match=f"{path} is damaged: pat_str .*(backtracks|empty string)"):
        read_tokenizer_file(str(path))


@pytest.mark.parametrize("call", ["encode_ordinary", "encode", "encode_to_numpy", "encode_ordinary_batch",
                                  "encode_batch"])
def test_every_encoder_failure_of_tiktoken_is_one_user_error(call):
    """tiktoken's regex engine gives up on ~10**6 spaces even with gpt2's pattern (a Rust panic, a BaseException)."""
    enc = encoding_from_dict({"pat_str": PATTERNS["gpt2"], "mergeable_ranks": BYTE_RANKS,
                              "special_tokens": {"<|endoftext|>": 256}, "path": "tok.pkl"})
    text = " " * 2_000_000 + "x"
    with pytest.raises(UserError, match="tok.pkl: tiktoken failed to split a .*split or shorten that document"):
        method = getattr(enc, call)
        method([text]) if call.endswith("batch") else method(text)
    assert enc.encode_ordinary("hi \ud800") == list(b"hi \xef\xbf\xbd")  # its own UnicodeEncodeError retry still works


@pytest.mark.parametrize("pattern", [r"\((?:[^()]++|(?R))*\)|.", r"(a)?(?(1)b|c)|.", r"(?:abc){e<=1}|."])
def test_constructs_the_check_cannot_reason_about_are_refused(pattern):
    """Recursion, conditionals, fuzzy matching: outside the class, so refused rather than trusted."""
    with pytest.raises(UserError, match="cannot be checked for catastrophic backtracking"):
        resolve_pattern(pattern)


def test_a_regex_whose_parser_changed_refuses_custom_patterns(monkeypatch):
    """The check reads regex's internal parse tree: if a new regex breaks that, patterns are refused, never let
    through unchecked; the built-in ones still load."""
    from gptlab.tokenizer import pattern_check

    def broken(pattern):
        raise AttributeError("'Sequence' object has no attribute 'items'")

    monkeypatch.setattr(pattern_check, "check_pattern", broken)
    with pytest.raises(UserError, match="cannot be checked"):
        resolve_pattern(r"\w+|\s+|.")
    assert resolve_pattern("gpt4") == ("gpt4", PATTERNS["gpt4"])
