"""What changed from one run to another: config keys and the code backups (unified diffs)."""
import difflib
import json
import os

from gptlab.compare.stats import VOLATILE_CONFIG_KEYS
from gptlab.experiment import CODE_DIR, CONFIG_FILE, read_run_json


def _fmt_value(value):
    return json.dumps(value, sort_keys=True, default=str)


def _code_files(run_path):
    root = os.path.join(run_path, CODE_DIR)
    files = {}
    if os.path.isdir(root):
        for dirpath, _, names in os.walk(root):
            for name in names:
                full = os.path.join(dirpath, name)
                files[os.path.relpath(full, root).replace(os.sep, "/")] = full
    return files


def _read_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def diff_runs(path_a, path_b):
    """Text of what changed from run A to run B: config keys (both values) and code backups (unified diffs)."""
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
    files_a, files_b = _code_files(path_a), _code_files(path_b)
    if not files_a or not files_b:
        missing = " and ".join(n for n, f in ((name_a, files_a), (name_b, files_b)) if not f)
        out.append(f"  cannot compare code: no {CODE_DIR}/ backup in {missing}")
        return "\n".join(out) + "\n"
    removed = sorted(set(files_a) - set(files_b))
    added = sorted(set(files_b) - set(files_a))
    patches, changed_files = [], []
    for rel in sorted(set(files_a) & set(files_b)):
        lines_a, lines_b = _read_lines(files_a[rel]), _read_lines(files_b[rel])
        if lines_a == lines_b:
            continue
        changed_files.append(rel)
        if lines_a is None or lines_b is None:
            patches.append(f"Binary file {rel} differs\n")
            continue
        patch = difflib.unified_diff(lines_a, lines_b, fromfile=f"A/{CODE_DIR}/{rel}", tofile=f"B/{CODE_DIR}/{rel}")
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
