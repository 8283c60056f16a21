"""LaTeX text: every string taken from a run (names, paths, flags, comments) escaped, and booktabs tables."""
from gptlab.compare.runs import MISSING
from gptlab.compare.tables import _latex

# Characters outside ASCII that pdflatex's default UTF-8 input (LaTeX 2018+, T1 fonts) may not know, as commands;
# Latin-1 letters pass through (but eth and thorn); anything else becomes [U+XXXX] rather than an error at compile time.
_UNICODE = {"×": r"$\times$", "†": r"\dag{}", "‡": r"\ddag{}", "²": r"\textsuperscript{2}",
            "³": r"\textsuperscript{3}", "–": "--", "—": "---", "’": "'", "‘": "`", "“": "``", "”": "''",
            "…": r"\ldots{}", "→": r"$\rightarrow$", "←": r"$\leftarrow$", "≈": r"$\approx$", "≤": r"$\leq$",
            "≥": r"$\geq$", "√": r"$\surd$", "·": r"$\cdot$", "µ": r"$\mu$", "°": r"$^\circ$",
            "\u00a0": "~"}


def escape(text):
    """`text` safe anywhere in a LaTeX document: special characters escaped (gptlab.compare's table escaping:
    \\ & % $ # _ { } ~ ^ < >, ±, Δ, — as a missing figure), control characters shown as escapes, other characters
    pdflatex may not know as commands or [U+XXXX]."""
    out = []
    # the text-companion glyphs would need bitmap fonts generated at compile time: math symbols instead
    escaped = (_latex(str(text)).replace(r"\textasciitilde{}", r"$\sim$").replace(r"\textasciicircum{}", r"\^{}")
               .replace(r"\textbackslash{}", r"$\backslash$"))
    for ch in escaped:
        if ord(ch) < 128:
            out.append(ch)
        elif ch in _UNICODE:
            out.append(_UNICODE[ch])
        elif ord(ch) < 256 and ch.isalpha() and ch not in "ðÐþÞ":  # (OT1 fonts have no eth or thorn)
            out.append(ch)
        else:
            out.append(f"[U+{ord(ch):04X}]")
    return "".join(out)


def tt(text):
    """Escaped text in typewriter type, breakable after / _ - . (long paths, flags and names in narrow columns)."""
    body = escape(text)
    for sep in ("/", r"\_", "-", "."):
        body = body.replace(sep, sep + r"\allowbreak{}")
    return rf"\texttt{{{body}}}"


def cell(value, digits=4):
    """A number with `digits` decimals, or -- for a figure not recorded."""
    return MISSING if value is None else f"{value:.{digits}f}"


def mean_std(values, digits=4):
    """'mean ± std' over values (± only with 2 or more), MISSING when empty."""
    import statistics

    values = [v for v in values if v is not None]
    if not values:
        return MISSING
    text = f"{statistics.mean(values):.{digits}f}"
    return text + (f" ± {statistics.stdev(values):.{digits}f}" if len(values) >= 2 else "")


def table(label, caption, headers, rows, align, notes=(), wide=False):
    """A booktabs table: headers and cells are plain text (escaped here); `notes` lines go under it, small. It is
    scaled down to the line's width when wider (main.tex's \fitwidth)."""
    lines = [r"\begin{table*}[t]" if wide else r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{{escape(caption)}}}", rf"\label{{{label}}}",
             r"\fitwidth{%", rf"\begin{{tabular}}{{{align}}}", r"\toprule",
             " & ".join(escape(h) for h in headers) + r" \\", r"\midrule"]
    lines += [" & ".join(escape(c) for c in row) + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{tabular}}"]
    lines += [rf"\par\smallskip{{\footnotesize {escape(n)}\par}}" for n in notes]
    lines.append(r"\end{table*}" if wide else r"\end{table}")
    return "\n".join(lines) + "\n"
