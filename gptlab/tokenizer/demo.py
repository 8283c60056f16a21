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
