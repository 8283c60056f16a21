"""What changed from one run to another: config keys and the code backups (unified diffs)."""
import difflib
import json
import os
import stat

from gptlab.compare.stats import VOLATILE_CONFIG_KEYS
from gptlab.train import code_backup
from gptlab.train.records import CODE_DIR, CONFIG_FILE, read_run_json

# What --diff reads of one run's code/ backup: regular files only (a symlink is followed only to one), this many
# and this many bytes in all; a backup beyond that is not compared, with a line saying why.
MAX_CODE_FILES = 5000
MAX_CODE_BYTES = 64 << 20


def _fmt_value(value):
    return json.dumps(value, sort_keys=True, default=str)


class _CodeView:
    """What one run's code/ stands for: `files` {path: bytes}; `copied` the paths read from code/ itself (shown as
    code/PATH), the rest rebuilt from the recorded commit + patch; `kind` "copy" (a full copy), "rebuilt" (commit +
    patch rebuilt here) or "unrebuilt" (commit + patch, its commit not at hand: copied files and the patch only)."""

    def __init__(self, files, copied, kind, describe, commit=None, reason=None):
        self.files, self.copied, self.kind, self.describe = files, copied, kind, describe
        self.commit, self.reason = commit, reason


def _unsafe_code_dir(root):
    """Why code/ cannot be read safely (an entry that is not a regular file or folder, such as a link to /dev/zero
    or a FIFO; too many files or bytes; a git.json the diff cannot use), or None."""
    count = total = 0
    for dirpath, _, names in os.walk(root):  # symlinked folders are neither entered nor read, here and in code_backup
        for name in names:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            try:
                st = os.stat(full)
            except OSError as err:
                return f"{CODE_DIR}/{rel} cannot be read ({err.strerror or err})"
            if not stat.S_ISREG(st.st_mode):
                return f"{CODE_DIR}/{rel} is not a regular file"
            count, total = count + 1, total + st.st_size
            if count > MAX_CODE_FILES or total > MAX_CODE_BYTES:
                return (f"it holds more than {MAX_CODE_FILES:,} files or {MAX_CODE_BYTES >> 20} MB, more than a "
                        "code backup")
    notes = []
    if os.path.lexists(os.path.join(root, code_backup.GIT_FILE)):
        record = read_run_json(root, code_backup.GIT_FILE, notes)
        if record is not None and not (isinstance(record.get("patch", ""), str)
                                       and isinstance(record.get("prefix", ""), str)
                                       and isinstance(record.get("research_files", []), list)
                                       and all(isinstance(f, str) for f in record.get("research_files", []))):
            notes.append(f"{code_backup.GIT_FILE} holds a field of the wrong type")
    return notes[0] if notes else None


def _code_view(run_path, repo=None):
    root = os.path.join(run_path, CODE_DIR)
    if not os.path.isdir(root):
        return None
    unsafe = _unsafe_code_dir(root)
    if unsafe:
        return _CodeView({}, set(), "unsafe", unsafe)
    try:
        record = code_backup.read_record(root)
    except code_backup.CannotRebuild as err:
        record = {"commit": "?", "unreadable": str(err)}
    plain = code_backup.read_files(root)
    if record is None:
        return _CodeView(plain, set(plain), "copy", f"full copy ({len(plain)} files)")
    patch_name = record.get("patch", code_backup.PATCH_FILE)
    copied = {rel: data for rel, data in plain.items()
              if rel not in (code_backup.GIT_FILE, code_backup.IGNORE_FILE, patch_name)}
    commit = record["commit"]
    patch_lines = plain.get(patch_name, b"").count(b"\n")
    patch = f"+ {patch_name} ({patch_lines} lines)" if patch_lines else "(no uncommitted changes)"
    whole = sorted(rel for rel in copied if rel != code_backup.TOKENIZER_SCRIPT)
    try:
        if "unreadable" in record:
            raise code_backup.CannotRebuild(record["unreadable"])
        files, used = code_backup.rebuild_code_dir(root, code_backup.repo_candidates(run_path, repo))
    except code_backup.CannotRebuild as err:
        files = dict(copied)
        if patch_name in plain:
            files[code_backup.PATCH_FILE] = plain[patch_name]
        return _CodeView(files, set(files), "unrebuilt",
                         f"{', '.join(whole) or 'no research file'} copied; commit {commit[:12]} {patch}", commit,
                         str(err))
    return _CodeView(files, set(copied), "rebuilt",
                     f"{', '.join(whole) or 'no research file'} copied; the other {len(files) - len(copied)} "
                     f"file(s) rebuilt from commit {commit[:12]} {patch} in {used}", commit)


def _lines(data):
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def diff_runs(path_a, path_b, repo=None):
    """Text of what changed from run A to run B: config keys (both values) and code backups (unified diffs).

    A backup in the commit + patch layout (gptlab.train.code_backup) is rebuilt into the run's whole source tree
    (its commit looked up in `repo`, the checkout the run recorded, the repository holding the run folder, this
    checkout) and compared file by file, with a full copy as well; when its commit is nowhere at hand, the commits,
    the patches and the copied files are compared instead, and a line says so."""
    notes_a, notes_b = [], []
    name_a, name_b = os.path.basename(os.path.normpath(path_a)), os.path.basename(os.path.normpath(path_b))
    config_a, config_b = read_run_json(path_a, CONFIG_FILE, notes_a), read_run_json(path_b, CONFIG_FILE, notes_b)
    out = [f"A = {path_a}", f"B = {path_b}", "", f"== config ({CONFIG_FILE}) =="]
    out += [f"  note: A: {n}" for n in notes_a] + [f"  note: B: {n}" for n in notes_b]
    if config_a is None or config_b is None:
        missing = " and ".join(n for n, c in ((name_a, config_a), (name_b, config_b)) if c is None)
        out.append(f"  cannot compare configs: no readable {CONFIG_FILE} in {missing}")
    else:
        changed = [k for k in sorted(set(config_a) & set(config_b)) if config_a[k] != config_b[k]]
        # What the experimenter changed first; what always differs between repeats (seed, time, command) last.
        changed.sort(key=lambda k: k in VOLATILE_CONFIG_KEYS)
        only_a = sorted(set(config_a) - set(config_b))
        only_b = sorted(set(config_b) - set(config_a))
        if not (changed or only_a or only_b):
            out.append("  identical")
        for key in changed:
            tag = "  (varies between repeats)" if key in VOLATILE_CONFIG_KEYS else ""
            out.append(f"  ~ {key}: {_fmt_value(config_a[key])} -> {_fmt_value(config_b[key])}{tag}")
        out += [f"  - {k}: {_fmt_value(config_a[k])}  (only in A)" for k in only_a]
        out += [f"  + {k}: {_fmt_value(config_b[k])}  (only in B)" for k in only_b]

    out += ["", f"== code ({CODE_DIR}/) =="]
    view_a, view_b = _code_view(path_a, repo), _code_view(path_b, repo)
    unsafe = [f"{n}: {v.describe}" for n, v in ((name_a, view_a), (name_b, view_b)) if v and v.kind == "unsafe"]
    if unsafe:
        out.append(f"  cannot compare code: not reading {CODE_DIR}/ of {'; '.join(unsafe)}")
        return "\n".join(out) + "\n"
    if not (view_a and view_a.files) or not (view_b and view_b.files):
        missing = " and ".join(n for n, v in ((name_a, view_a), (name_b, view_b)) if not (v and v.files))
        out.append(f"  cannot compare code: no {CODE_DIR}/ backup in {missing}")
        return "\n".join(out) + "\n"
    files_a, files_b = view_a.files, view_b.files
    if view_a.kind != "copy" or view_b.kind != "copy":
        out += [f"  A: {view_a.describe}", f"  B: {view_b.describe}"]
    stuck = [(n, v) for n, v in (("A", view_a), ("B", view_b)) if v.kind == "unrebuilt"]
    if stuck:
        # Without the commit the rest of the tree is unknown here: compare what each run carries itself.
        keep = set().union(*(v.files for _, v in stuck))
        files_a = {rel: data for rel, data in files_a.items() if rel in keep}
        files_b = {rel: data for rel, data in files_b.items() if rel in keep}
        out.append(f"  cannot rebuild the sources of {' and '.join(n for n, _ in stuck)} ("
                   + "; ".join(f"{n}: {v.reason}" for n, v in stuck) + "): comparing the commits "
                   f"({view_a.commit or 'none, a full copy'} -> {view_b.commit or 'none, a full copy'}), "
                   f"the uncommitted patches and the copied files only")
    removed = sorted(set(files_a) - set(files_b))
    added = sorted(set(files_b) - set(files_a))
    patches, changed_files = [], []
    for rel in sorted(set(files_a) & set(files_b)):
        if files_a[rel] == files_b[rel]:
            continue
        lines_a, lines_b = _lines(files_a[rel]), _lines(files_b[rel])
        changed_files.append(rel)
        if lines_a is None or lines_b is None:
            patches.append(f"Binary file {rel} differs\n")
            continue
        label_a = f"A/{CODE_DIR}/{rel}" if rel in view_a.copied else f"A/{rel}"
        label_b = f"B/{CODE_DIR}/{rel}" if rel in view_b.copied else f"B/{rel}"
        patch = difflib.unified_diff(lines_a, lines_b, fromfile=label_a, tofile=label_b)
        patches.append("".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                               for line in patch))
    if not (removed or added or changed_files):
        out.append(f"  identical ({len(files_a)} files)")
    out += [f"  changed: {rel}" for rel in changed_files]
    out += [f"  added in B: {rel}" for rel in added]
    out += [f"  removed in B: {rel}" for rel in removed]
    text = "\n".join(out) + "\n"
    if patches:
        text += "\n" + "".join(patches)
    return text


def _changed_lines(path_a, path_b, rel):
    """'+added −removed' lines of one research file from run A's code/ to run B's ('?' where unreadable)."""
    texts = []
    for path in (path_a, path_b):
        full = os.path.join(path, CODE_DIR, rel)
        try:
            if not os.path.lexists(full):  # a copy its repository need not hold: the commit's file
                texts.append(_lines(code_backup.read_backup_file(os.path.join(path, CODE_DIR), rel,
                                                                 code_backup.repo_candidates(path))))
                continue
            if not stat.S_ISREG(os.lstat(full).st_mode) or os.path.getsize(full) > code_backup.MAX_RESEARCH_FILE_BYTES:
                return "?"
            with open(full, "rb") as f:
                texts.append(_lines(f.read()))
        except (OSError, code_backup.CannotRebuild):
            texts.append([])
    if None in texts:
        return "binary"
    diff = list(difflib.unified_diff(texts[0], texts[1], n=0))
    added = sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in diff if line.startswith("-") and not line.startswith("---"))
    return f"+{added} −{removed}"


def research_code_notes(runs):
    """One line per pair of settings that share every setting but not their research code (model.py,
    train_gpt.py, ... as their code backups hold them): separate seed groups, with what changed and the --diff
    command that shows it."""
    from gptlab.compare.stats import run_group_key, run_root, seed_group_key

    buckets = {}
    for run in runs:
        if run.config and run.research_code:
            settings = seed_group_key(run.config, None, run_root(run.path, run.config))
            buckets.setdefault(settings, {}).setdefault(run_group_key(run), []).append(run)
    notes = []
    for versions in buckets.values():
        members = list(versions.values())
        for first, other in zip(members, members[1:]):
            a, b = first[0], other[0]
            changed = sorted(rel for rel in set(a.research_code) | set(b.research_code)
                             if a.research_code.get(rel) != b.research_code.get(rel))
            what = ", ".join(f"{rel} ({_changed_lines(a.path, b.path, rel)})" for rel in changed)
            notes.append(f"{', '.join(r.name for r in first)} and {', '.join(r.name for r in other)} share every "
                         f"setting but not their research code ({what}): separate settings, not seed noise; "
                         f"`python compare_experiments.py --diff {a.name} {b.name}` shows the diff.")
    return notes
