"""--demo: show a sample text coloured by token (ANSI background colours) while the merges are learned."""
import regex

# 256-colour background codes that keep black text readable
_COLOURS = [153, 194, 224, 230, 189, 159, 217, 187, 225, 158]


def encode_with_merges(text, pattern, merges):
    """Token byte strings of `text` under `merges` (slow and simple; for a short sample only)."""
    rank = {pair: 256 + k for k, pair in enumerate(merges)}
    vocab = [bytes([i]) for i in range(256)]
    for a, b in merges:
        vocab.append(vocab[a] + vocab[b])
    pieces = []
    for word in regex.findall(pattern, text):
        ids = list(word.encode("utf-8"))
        while len(ids) >= 2:
            best = min(zip(ids, ids[1:]), key=lambda p: rank.get(p, float("inf")))
            if best not in rank:
                break
            new_id, out, i = rank[best], [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == best:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        pieces.extend(vocab[i] for i in ids)
    return pieces


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
