"""The appendix: the architecture and recipe each run actually trained, read from its own records (never from
today's model.py): config.json's fields, and the model.py and train_gpt.py its code/ backup kept (or, without a
backup, the model source its checkpoint carries). The sources are parsed, never run: their classes, the
configuration dataclass's fields, and every comment or docstring sentence that credits a trick, with its citation.
Another model source gives another appendix."""
import ast
import hashlib
import io
import os
import re
import tokenize
from dataclasses import dataclass, field

from gptlab.compare.runs import MISSING
from gptlab.compare.stats import VOLATILE_CONFIG_KEYS
from gptlab.core.errors import UserError
from gptlab.paper import bib
from gptlab.paper.latex import escape, tt
from gptlab.train import code_backup
from gptlab.train.code_backup import MAX_RESEARCH_FILE_BYTES
from gptlab.train.records import CODE_DIR

MODEL_FILE, TRAIN_FILE = "model.py", "train_gpt.py"
MAX_CREDIT_CHARS = 300
# config.json entries that describe the machine or the run's bookkeeping, not the recipe
NOT_RECIPE = set(VOLATILE_CONFIG_KEYS) | {"versions", "lr_column", "timing", "experiments_dir", "train_shards",
                                          "val_shards", "cpu_model", "gpu_name", "gpu_count", "model_source_sha256",
                                          "tokenizer_ranks_sha256", "git_commit", "resumed_from", "resume_step",
                                          "load_avg_start", "cpu_cores", "cpu_threads", "usd_per_gpu_hour_source",
                                          "gpu_bf16_peak_tflops"}


@dataclass
class Source:
    """One recorded source file (model.py or train_gpt.py) and the settings that trained with it."""
    file: str
    code: str
    origin: str  # where it was read: RUN/code/model.py, or a checkpoint
    settings: list = field(default_factory=list)

    @property
    def sha256(self):
        return hashlib.sha256(self.code.encode("utf-8")).hexdigest()


def _read_text(path):
    try:
        if os.path.getsize(path) > MAX_RESEARCH_FILE_BYTES:
            return None
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def _checkpoint_model_source(run):
    """The model source a run's latest checkpoint carries (a run without a code/ backup), else None."""
    from gptlab.checkpoint.checkpointing import load_checkpoint  # torch: only for a run without a backup
    from gptlab.train.records import latest_checkpoint

    try:
        payload = load_checkpoint(latest_checkpoint(run.path), load_weights=False)
    except UserError:
        return None
    source = payload.get("model_source")
    return source.get("code") if isinstance(source, dict) and isinstance(source.get("code"), str) else None


def _from_commit(run, file):
    """A research file whose copy the repository does not hold (a committed baseline): its commit's, checked."""
    try:
        data = code_backup.read_backup_file(os.path.join(run.path, CODE_DIR), file,
                                            code_backup.repo_candidates(run.path))
    except code_backup.CannotRebuild:
        return None
    return data.decode("utf-8", errors="replace") if len(data) <= MAX_RESEARCH_FILE_BYTES else None


def recorded_source(run, file):
    """(code, origin) of the file as the run recorded it, or (None, None)."""
    path = os.path.join(run.path, CODE_DIR, file)
    code = _read_text(path) if os.path.isfile(path) else _from_commit(run, file)
    if code is not None:
        return code, os.path.join(run.name, CODE_DIR, file)
    if file == MODEL_FILE:
        code = _checkpoint_model_source(run)
        if code is not None:
            return code, f"{run.name}'s checkpoint (model_source)"
    return None, None


def sources_of(study, file):
    """[Source] of `file`, one per distinct text, each with the settings that trained with it; and the settings that
    recorded none."""
    found, missing = {}, []
    for s in study.settings:
        code, origin = recorded_source(s.runs[0], file)
        if code is None:
            missing.append(s.name)
            continue
        source = Source(file, code, origin)
        found.setdefault(source.sha256, source).settings.append(s.name)
    return list(found.values()), missing


# ------------------------------------------------------------------------------------------------ parsing
@dataclass
class Parsed:
    doc: str = ""
    classes: list = field(default_factory=list)  # (name, bases, first sentence of its docstring)
    fields: list = field(default_factory=list)  # (dataclass, field, type, default, help)
    credits: list = field(default_factory=list)  # (line, where, text, keys)
    error: str = None


def _first_sentence(doc):
    text = " ".join((doc or "").split())
    match = re.match(r"(.+?[.])(\s|$)", text)
    return (match.group(1) if match else text)[:200]


def _is_dataclass(node):
    def name(d):
        d = d.func if isinstance(d, ast.Call) else d
        return d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else None

    return any(name(d) == "dataclass" for d in node.decorator_list)


def _field_default(value):
    """(default, help) of a dataclass field's value: `x = 3` or `x = field(default=3, metadata={"help": ...})`."""
    if value is None:
        return MISSING, ""
    if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
        default, help_text = MISSING, ""
        for kw in value.keywords:
            if kw.arg == "default":
                default = ast.unparse(kw.value)
            elif kw.arg == "default_factory":
                default = ast.unparse(kw.value) + "()"
            elif kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                for k, v in zip(kw.value.keys, kw.value.values):
                    if isinstance(k, ast.Constant) and k.value == "help" and isinstance(v, ast.Constant):
                        help_text = str(v.value)
        return default, help_text
    return ast.unparse(value), ""


def _scopes(tree):
    """[(first line, last line, dotted name)] of every class and function."""
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                out.append((child.lineno, child.end_lineno, name))
                visit(child, name + ".")
            else:
                visit(child, prefix)
    visit(tree, "")
    return out


def _where(scopes, line):
    inside = [(last - first, name) for first, last, name in scopes if first <= line <= last]
    return min(inside)[1] if inside else "module"


def _comment_blocks(code):
    """[(first line, text)] of the comments, consecutive comment lines joined into one block."""
    blocks, last = [], None
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return blocks
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        text = tok.string.lstrip("#").strip()
        line = tok.start[0]
        if blocks and last == line - 1:
            blocks[-1] = (blocks[-1][0], blocks[-1][1] + " " + text)
        else:
            blocks.append((line, text))
        last = line
    return blocks


def _docstring_sentences(tree):
    """[(line, sentence)] of every docstring's sentences."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc and node.body:
                line = node.body[0].lineno
                for sentence in re.split(r"(?<=[.;])\s+(?=[A-Z(])|\n\s*\n", doc):
                    out.append((line, " ".join(sentence.split())))
    return out


def parse_source(code):
    """What the appendix shows of a source: read by ast and tokenize, never imported or run."""
    parsed = Parsed()
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError) as err:
        parsed.error = f"it does not parse as Python ({type(err).__name__}: {err})"
        return parsed
    parsed.doc = _first_sentence(ast.get_docstring(tree))
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            parsed.classes.append((node.name, ", ".join(ast.unparse(b) for b in node.bases),
                                   _first_sentence(ast.get_docstring(node))))
            if _is_dataclass(node):
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                        default, help_text = _field_default(stmt.value)
                        parsed.fields.append((node.name, stmt.target.id, ast.unparse(stmt.annotation), default,
                                              help_text))
    scopes = _scopes(tree)
    for line, text in _comment_blocks(code) + _docstring_sentences(tree):
        if bib.is_credit(text):
            short = text if len(text) <= MAX_CREDIT_CHARS else text[:MAX_CREDIT_CHARS - 3] + "..."
            parsed.credits.append((line, _where(scopes, line), short, bib.cite_keys(text)))
    parsed.credits.sort()
    return parsed


# ------------------------------------------------------------------------------------------------ LaTeX
def _value(config, key):
    if key not in config:
        return MISSING
    value = config[key]
    return "null" if value is None else str(value)


def _longtable(headers, rows, align, caption):
    lines = [rf"\begin{{longtable}}{{{align}}}", rf"\caption{{{escape(caption)}}}\\", r"\toprule",
             " & ".join(escape(h) for h in headers) + r" \\", r"\midrule", r"\endhead"]
    lines += [" & ".join(rows_cell for rows_cell in row) + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{longtable}"]
    return "\n".join(lines)


def _p(width):
    return rf"p{{{width}\linewidth}}"


def _source_section(source, parsed, settings_runs, config_fields):
    """The subsection of one model source: its classes, its configuration fields with the trained values, and the
    tricks it credits."""
    out = [rf"\subsection{{Model source {tt(source.sha256[:12])}}}",
           f"Read from {tt(source.origin)} (sha256 {tt(source.sha256[:16])}...); trained by "
           + ", ".join(escape(s) for s in source.settings) + "."]
    if parsed.error:
        return out + [f"The source could not be read: {escape(parsed.error)}."]
    if parsed.doc:
        out.append(f"Its own summary: ``{escape(parsed.doc)}''")
    if parsed.classes:
        out.append(_longtable(["Class", "Bases", "What it is (its docstring)"],
                              [[tt(n), tt(b or MISSING), escape(d or MISSING)] for n, b, d in parsed.classes],
                              rf"l{_p(0.2)}{_p(0.5)}", f"The classes of {source.file}."))
    if parsed.fields:
        names = [s for s in source.settings]
        rows = []
        for cls, name, kind, default, help_text in parsed.fields:
            trained = [_value(settings_runs[s].config, name) for s in names]
            rows.append([tt(f"{cls}.{name}"), tt(kind), tt(default)] + [tt(v) for v in trained] + [escape(help_text)])
        out.append(_longtable(["Field", "Type", "Default"] + [f"{s} (trained)" for s in names] + ["Meaning"], rows,
                              "lll" + "l" * len(names) + _p(0.35),
                              f"The architecture's configuration fields in {source.file}, with the values the runs "
                              "trained (config.json)."))
        config_fields.update(name for _, name, _, _, _ in parsed.fields)
    out.append(_credits(source, parsed))
    return out


def _credits(source, parsed):
    if not parsed.credits:
        return f"{source.file} credits no trick in its comments."
    items = []
    for line, where, text, keys in parsed.credits:
        cite = rf" \citep{{{','.join(keys)}}}" if keys else ""
        items.append(rf"\item {tt(where)} (line {line}): {escape(text)}{cite}")
    return ("The tricks " + escape(source.file) + " credits (its comments and docstrings, as the run kept it):\n"
            + "\\begin{itemize}\\small\n" + "\n".join(items) + "\n\\end{itemize}")


def _recipe_table(study, skip):
    """config.json's scalar entries that are neither architecture fields nor bookkeeping, per setting."""
    names = [s.name for s in study.settings]
    configs = [s.runs[0].config for s in study.settings]
    keys = sorted({k for c in configs for k, v in c.items() if k not in skip and k not in NOT_RECIPE
                   and (v is None or isinstance(v, (str, int, float, bool)) or
                        (isinstance(v, list) and all(isinstance(x, str) for x in v)))})
    rows = []
    for key in keys:
        values = [" ".join(c[key]) if isinstance(c.get(key), list) else _value(c, key) for c in configs]
        rows.append([tt(key)] + [tt(v) for v in values])
    return _longtable(["config.json field"] + names, rows, "l" + _p(0.6 / max(1, len(names))) * len(names),
                      "The training recipe each setting recorded (config.json of its first run; every seed of a "
                      "setting shares it).")


def render(study):
    """appendix.tex, and the bib keys it cites."""
    settings_runs = {s.name: s.runs[0] for s in study.settings}
    out = [r"\section{Architecture and training recipe}\label{app:arch}",
           "Generated by make\\_paper.py from the runs' own records: the model source each run trained "
           "(its code/ backup, or its checkpoint) and its config.json. Regenerate rather than edit."]
    keys, config_fields = [], set()
    for file, title in ((MODEL_FILE, "the architecture"), (TRAIN_FILE, "the training script")):
        sources, missing = sources_of(study, file)
        if file == TRAIN_FILE:
            out.append(r"\subsection{Training script}")
        for source in sources:
            parsed = parse_source(source.code)
            keys += [k for *_, ks in parsed.credits for k in ks]
            if file == MODEL_FILE:
                out += _source_section(source, parsed, settings_runs, config_fields)
            else:
                out += [f"{tt(source.origin)} (sha256 {tt(source.sha256[:12])}), run by "
                        + ", ".join(escape(s) for s in source.settings) + ".", _credits(source, parsed)]
        if missing:
            out.append(f"No {escape(file)} was recorded for {', '.join(escape(m) for m in missing)} "
                       f"({escape(title)} cannot be shown).")
    out.append(r"\subsection{Training recipe}")
    out.append(_recipe_table(study, config_fields))
    return "\n\n".join(out) + "\n", list(dict.fromkeys(keys))
