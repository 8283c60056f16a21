"""A run's code backup, run_dir/code/: the research surface copied whole, everything else as git commit + patch.

    train_gpt.py, model.py          the research surface (RESEARCH_FILES; the run's architecture module in place
                                    of model.py, e.g. gpt2.py), copied byte for byte
    tokenizer_train_script.py       the tokenizer's training script from its pickle (or a placeholder line)
    git.json                        inside a git checkout: the commit (HEAD), what the patch leaves out, the
                                    sha256 of every copy, and which copies the commit holds byte for byte
    uncommitted.patch               `git diff HEAD --binary` of the project: uncommitted changes to tracked files
                                    and the untracked, not ignored project sources as new files (experiments/
                                    and the research files are left out: the first is runs, the rest is copied)
    .gitignore                      the copies a repository need not hold: those the commit holds byte for byte,
                                    and the tokenizer's script (the tokenizer carries it); so a run folder
                                    committed as a baseline keeps its record (commit, sha256s, patch) and any
                                    copy the commit lacks, and no duplicate of the code

A folder read back from the repository (a fresh clone) has no ignored copy: read_backup_file, research_code and
rebuild_sources take such a file from the commit git.json names, checked against the sha256 it recorded.

Outside a git checkout (no .git, git missing, no commit yet) every project source is copied instead, as older
runs did for everything: top-level *.py, gptlab/**/*.py and *.c, requirements.txt.

rebuild_sources(run_dir) gives back the run's whole source tree ({path: bytes}): the commit's files with the
patch applied (in a temporary folder; the checkout, its index and its worktree are only read) and the copied
files laid over them; for an older full-copy backup, the copy itself.

    python -m gptlab.train.code_backup RUN_DIR OUT_DIR     # write a run's rebuilt sources into a new OUT_DIR
    python -m gptlab.train.code_backup --by-reference RUN_DIR...   # an older backup: record sha256s, .gitignore
"""
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

from gptlab.core.errors import UserError, run_cli
from gptlab.core.files import atomic_write
from gptlab.core.paths import REPO_ROOT
from gptlab.train.records import CODE_DIR, CONFIG_FILE

RESEARCH_FILES = ("train_gpt.py", "model.py")  # copied whole: what an experiment edits
TRAINING_FILE = RESEARCH_FILES[0]
TOKENIZER_SCRIPT = "tokenizer_train_script.py"
NO_TOKENIZER_SCRIPT = "# the tokenizer pickle carried no training script\n"
GIT_FILE = "git.json"
PATCH_FILE = "uncommitted.patch"
IGNORE_FILE = ".gitignore"
PATCH_EXCLUDED_DIRS = ("experiments",)  # run folders and their reports are results, not code
BACKUP_FORMAT = 1
GIT_TIMEOUT_S = 120
PROJECT_ROOT = REPO_ROOT


class CannotRebuild(Exception):
    """A run's sources cannot be rebuilt here (its commit is not in any repository at hand, or git failed)."""


class _GitError(Exception):
    pass


# ------------------------------------------------------------------------------------------------ project sources
def is_project_source(rel):
    """A project source the run uses: top-level *.py, gptlab/**/*.py and gptlab/**/*.c, requirements.txt
    ('/'-separated path relative to the project root)."""
    parts = rel.split("/")
    if len(parts) == 1:
        return rel.endswith(".py") or rel == "requirements.txt"
    return parts[0] == "gptlab" and "__pycache__" not in parts[:-1] and rel.endswith((".py", ".c"))


def project_source_files(repo_root):
    """Relative paths of the project sources in a folder (what a full-copy backup copies), sorted."""
    files = [f for f in os.listdir(repo_root) if is_project_source(f) and os.path.isfile(os.path.join(repo_root, f))]
    for dirpath, dirnames, filenames in os.walk(os.path.join(repo_root, "gptlab")):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), repo_root).replace(os.sep, "/")
            if is_project_source(rel) and os.path.isfile(os.path.join(repo_root, rel)):
                files.append(rel)
    return sorted(files)


# ------------------------------------------------------------------------------------------------ git
def _git(cwd, *args, env=None, stdin=None):
    """stdout (bytes) of `git --no-optional-locks ARGS` in cwd; _GitError with git's message on failure."""
    full_env = {k: v for k, v in os.environ.items() if k != "GIT_INDEX_FILE"}
    full_env.update(env or {})
    try:
        proc = subprocess.run(["git", "--no-optional-locks", *args], cwd=cwd, env=full_env, input=stdin,
                              capture_output=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as err:
        raise _GitError(f"git {args[0]}: {err}") from None
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip().splitlines()
        raise _GitError(f"git {args[0]}: {message[-1] if message else f'exit status {proc.returncode}'}")
    return proc.stdout


def _z_list(data):
    return [p for p in data.decode("utf-8", "surrogateescape").split("\0") if p]


def _excluded(rel, research_files):
    return rel in research_files or any(rel == d or rel.startswith(d + "/") for d in PATCH_EXCLUDED_DIRS)


def _pathspec_excludes(research_files):
    return [f":(exclude){d}" for d in PATCH_EXCLUDED_DIRS] + [f":(exclude,literal){f}" for f in research_files]


def _diff_against(cwd, env, treeish, index_file, new_files, research_files):
    """`git diff TREEISH --binary` of the worktree through a temporary index (TREEISH's entries, plus new_files
    as intent-to-add, so they show as new files); experiments/ and the research files left out."""
    env = dict(env, GIT_INDEX_FILE=index_file)
    _git(cwd, "read-tree", treeish, env=env)
    if new_files:
        _git(cwd, "--literal-pathspecs", "add", "--intent-to-add", "--force", "--pathspec-from-file=-",
             "--pathspec-file-nul", env=env, stdin="\0".join(new_files).encode("utf-8", "surrogateescape"))
    return _git(cwd, "diff", treeish, "--binary", "--no-renames", "--no-ext-diff", "--no-textconv", "--no-color",
                "--ignore-submodules", "--relative", "--src-prefix=a/", "--dst-prefix=b/", "--", ".",
                *_pathspec_excludes(research_files), env=env)


def git_snapshot(repo_root, research_files=RESEARCH_FILES):
    """What the checkout holds beyond its HEAD: {"commit", "prefix", "patch" (bytes), "new_files"}; None outside a
    git checkout (no git, not a work tree, no commit yet). Reads only: the patch is made through a temporary index,
    so the checkout's own index and worktree are not touched."""
    try:
        if _git(repo_root, "rev-parse", "--is-inside-work-tree").strip() != b"true":
            return None
        commit = _git(repo_root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}").decode().strip()
        prefix = _git(repo_root, "rev-parse", "--show-prefix").decode().strip()
    except _GitError:
        return None
    if not commit:
        return None
    # files the index tracks beyond HEAD (git add-ed, not committed) and untracked, not ignored project sources
    # `commit`, not HEAD, from here on: a commit made meanwhile must not move the patch's base
    in_head = set(_z_list(_git(repo_root, "ls-tree", "-r", "-z", "--name-only", commit)))
    staged_new = [p for p in _z_list(_git(repo_root, "ls-files", "-z")) if p not in in_head]
    untracked = [p for p in _z_list(_git(repo_root, "ls-files", "-z", "--others", "--exclude-standard"))
                 if is_project_source(p)]
    new_files = sorted({p for p in staged_new + untracked
                        if not _excluded(p, research_files) and os.path.lexists(os.path.join(repo_root, p))})
    tmp = tempfile.mkdtemp(prefix="gptlab-code-backup-")
    try:
        patch = _diff_against(repo_root, {}, commit, os.path.join(tmp, "index"), new_files, research_files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"commit": commit, "prefix": prefix, "patch": patch, "new_files": new_files}


# ------------------------------------------------------------------------------------------------ backup
def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _write_all(code_dir, files):
    """Write {rel: bytes} under code_dir, each atomically; never replaces a file (the run folder is new)."""
    for rel in sorted(files):
        with atomic_write(os.path.join(code_dir, *rel.split("/")), "wb") as f:
            f.write(files[rel])


def backup_code(repo_root, run_dir, tokenizer_script="", research_texts=None):
    """Write run_dir/code/ (layout in the module docstring) and return what was written. research_texts:
    {research file: text} that the run used instead of the checkout's file (a resumed run trains the model.py its
    checkpoint carries). Returns
    {"files": [paths under code/], "git_commit": HEAD's sha or None outside git, "patch_lines": lines of
    uncommitted.patch or None, "new_files": untracked / newly added sources carried by the patch, "git_error": why
    a git checkout was copied in full instead (git failed), or None, "research_files": the research files}. The
    research files are train_gpt.py and the research_texts' files (the run's architecture module), else
    RESEARCH_FILES."""
    repo_root = os.path.abspath(repo_root)
    research = ((TRAINING_FILE, *[rel for rel in research_texts if rel != TRAINING_FILE]) if research_texts
                else RESEARCH_FILES)
    files = {rel: _read(os.path.join(repo_root, rel)) for rel in research
             if os.path.isfile(os.path.join(repo_root, rel))}
    files.update({rel: text.encode("utf-8") for rel, text in (research_texts or {}).items()})
    copied_whole = sorted(files)
    try:
        snapshot, git_error = git_snapshot(repo_root, research), None
    except _GitError as err:  # a checkout git cannot read (a damaged index...): a full copy still records the run
        snapshot, git_error = None, str(err)
    info = {"git_commit": None, "patch_lines": None, "new_files": [], "git_error": git_error,
            "research_files": list(research)}
    if snapshot is None:
        for rel in project_source_files(repo_root):
            files.setdefault(rel, _read(os.path.join(repo_root, rel)))
    else:
        patch_lines = snapshot["patch"].count(b"\n")
        record = {"format": BACKUP_FORMAT, "commit": snapshot["commit"], "repo": repo_root,
                  "prefix": snapshot["prefix"], "research_files": list(research),
                  "copied_whole": copied_whole, "patch": PATCH_FILE, "patch_lines": patch_lines,
                  "patch_leaves_out": [d + "/" for d in PATCH_EXCLUDED_DIRS] + list(research),
                  "new_files_in_patch": snapshot["new_files"],
                  "rebuild": "python -m gptlab.train.code_backup RUN_DIR OUT_DIR"}
        files[TOKENIZER_SCRIPT] = (tokenizer_script or NO_TOKENIZER_SCRIPT).encode("utf-8")
        record.update(_by_reference(repo_root, snapshot["commit"], snapshot["prefix"], files, copied_whole))
        files[IGNORE_FILE] = ignore_text(record["at_commit"])
        files[PATCH_FILE] = snapshot["patch"]
        files[GIT_FILE] = (json.dumps(record, indent=2) + "\n").encode()
        info.update(git_commit=snapshot["commit"], patch_lines=patch_lines, new_files=snapshot["new_files"])
    files.setdefault(TOKENIZER_SCRIPT, (tokenizer_script or NO_TOKENIZER_SCRIPT).encode("utf-8"))
    _write_all(os.path.join(run_dir, CODE_DIR), files)
    return {"files": sorted(files), **info}


def describe_backup(info):
    """One line for the training log from backup_code's result."""
    if info["git_commit"] is None:
        why = f"git failed: {info['git_error']}" if info.get("git_error") else "not a git checkout"
        return f"code backup: {len(info['files'])} files copied ({why})"
    copied = [f for f in info["files"] if f in info.get("research_files", RESEARCH_FILES)]
    return (f"code backup: {', '.join(copied) or 'no research file'} copied; the rest is commit "
            f"{info['git_commit'][:12]} + {PATCH_FILE} ({info['patch_lines']} lines"
            + (f", {len(info['new_files'])} new file(s)" if info["new_files"] else "") + ")")


# ------------------------------------------------------------------------------------------------ by reference
def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def _blob_at(repo, commit, path):
    """The bytes of `path` in `commit`, or None where the commit has no such file."""
    try:
        return _git(repo, "cat-file", "blob", f"{commit}:{path}")
    except _GitError:
        return None


def _by_reference(repo, commit, prefix, files, copied):
    """{"sha256": {copy: digest}, "at_commit": [the copies `commit` holds byte for byte]} for git.json."""
    return {"sha256": {rel: _sha256(files[rel]) for rel in sorted(set(copied) | {TOKENIZER_SCRIPT}) if rel in files},
            "at_commit": sorted(rel for rel in copied if _blob_at(repo, commit, prefix + rel) == files[rel])}


def ignore_text(at_commit):
    """code/.gitignore: the copies the commit holds, and the tokenizer's script, are not for the repository."""
    lines = ["# copies a repository need not hold (gptlab.train.code_backup): git.json's commit holds these byte for",
             "# byte, and the tokenizer carries its script; git.json records every copy's sha256"]
    return ("\n".join(lines + [f"/{rel}" for rel in [*at_commit, TOKENIZER_SCRIPT]]) + "\n").encode()


def read_backup_file(code_dir, rel, repos=()):
    """The bytes of code/REL as the run recorded them: the copy; else, for a copy its repository need not hold
    (git.json's at_commit: a baseline read back from a clone), the file in git.json's commit, found in the first of
    `repos` that has it and checked against the sha256 git.json recorded. CannotRebuild when neither is at hand."""
    path = os.path.join(code_dir, rel)
    if os.path.isfile(path):
        return _read(path)
    record = read_record(code_dir) or {}
    if rel not in record.get("at_commit", []):
        raise CannotRebuild(f"{rel} is not in {code_dir}")
    repo = find_repo(record["commit"], list(repos) or [os.path.abspath(code_dir), PROJECT_ROOT])
    data = _blob_at(repo, record["commit"], record.get("prefix", "") + rel)
    if data is None or _sha256(data) != record.get("sha256", {}).get(rel):
        raise CannotRebuild(f"{rel} in commit {record['commit'][:12]} is not the file {code_dir}/{GIT_FILE} "
                            "recorded (its sha256 differs)")
    return data


def record_by_reference(run_dir, repo=None):
    """An older git.json backup (no sha256s): record every copy's sha256 and which the commit holds, and write
    code/.gitignore, so the folder can be committed without its duplicates. The copies stay. Returns at_commit."""
    code_dir = os.path.join(run_dir, CODE_DIR)
    try:
        record = read_record(code_dir)
        if record is None:
            raise UserError(f"{code_dir} is a full copy; convert it first (convert_full_copy)")
        found = find_repo(record["commit"], repo_candidates(run_dir, repo))
    except CannotRebuild as err:
        raise UserError(f"{run_dir}: {err}") from None
    files = {rel: _read(os.path.join(code_dir, rel)) for rel in [*record.get("copied_whole", []), TOKENIZER_SCRIPT]
             if os.path.isfile(os.path.join(code_dir, rel))}
    record.update(_by_reference(found, record["commit"], record.get("prefix", ""), files,
                                record.get("copied_whole", [])))
    with atomic_write(os.path.join(code_dir, GIT_FILE), "w", overwrite=True) as f:
        f.write(json.dumps(record, indent=2) + "\n")
    with atomic_write(os.path.join(code_dir, IGNORE_FILE), "wb", overwrite=True) as f:
        f.write(ignore_text(record["at_commit"]))
    return record["at_commit"]


# ------------------------------------------------------------------------------------------------ identity
MAX_RESEARCH_FILE_BYTES = 16 << 20  # a research file beyond this (or not a regular file) is named, not read


def research_code(code_dir):
    """{research file: sha256 of its bytes} of a backup: the files git.json names as research files (a full copy or
    an unreadable git.json: train_gpt.py and the run's architecture module, _copied_research_files), a missing one
    as "missing"; None without a code/ folder. What a seed
    group is keyed by besides the configuration: the same code and settings give the same numbers."""
    import stat

    if not os.path.isdir(code_dir):
        return None
    try:
        record = read_record(code_dir) or {}
    except CannotRebuild:
        record = {}
    names = record.get("research_files")
    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        names = _copied_research_files(code_dir)
    digests = {}
    for rel in names:
        path = os.path.join(code_dir, rel)
        try:
            st = os.lstat(path)
        except OSError:  # a copy the repository does not hold stands for the commit's file of this sha256
            at_commit = rel in record.get("at_commit", []) and record.get("sha256", {}).get(rel)
            digests[rel] = at_commit if isinstance(at_commit, str) else "missing"
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_RESEARCH_FILE_BYTES:
            digests[rel] = f"unread ({st.st_size} bytes)"
            continue
        with open(path, "rb") as f:
            digests[rel] = hashlib.sha256(f.read()).hexdigest()
    return digests


# ------------------------------------------------------------------------------------------------ rebuild
def _copied_research_files(code_dir):
    """The research files of a full copy (no git.json says): train_gpt.py and the architecture module the run
    trained (model.py, gpt2.py, llama.py...): the copied top-level file whose sha256 is the model source's that the
    run's config.json records. RESEARCH_FILES when none is (a run from before the record)."""
    import hashlib

    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(code_dir)), CONFIG_FILE), encoding="utf-8") as f:
            sha = json.load(f).get("model_source_sha256")
        names = sorted(os.listdir(code_dir))
    except (OSError, ValueError, AttributeError):
        return RESEARCH_FILES
    for name in names if isinstance(sha, str) else ():
        path = os.path.join(code_dir, name)
        if (name.endswith(".py") and name != TRAINING_FILE and os.path.isfile(path) and not os.path.islink(path)
                and os.path.getsize(path) <= MAX_RESEARCH_FILE_BYTES):
            with open(path, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() == sha:
                    return (TRAINING_FILE, name)
    return RESEARCH_FILES


def read_record(code_dir):
    """code/git.json as a dict; None for a full-copy backup (no git.json). A damaged one is CannotRebuild."""
    path = os.path.join(code_dir, GIT_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            record = json.load(f)
        if not isinstance(record, dict) or not isinstance(record.get("commit"), str):
            raise ValueError("no commit in it")
    except (OSError, ValueError) as err:
        raise CannotRebuild(f"{GIT_FILE} is unreadable ({err})") from None
    return record


def _toplevel(path):
    try:
        return _git(path, "rev-parse", "--show-toplevel").decode().strip() or None
    except _GitError:
        return None


def find_repo(commit, candidates):
    """The first candidate folder whose git repository holds `commit`; CannotRebuild naming the folders tried."""
    tried = []
    for path in candidates:
        if not path or not os.path.isdir(path):
            continue
        top = _toplevel(path)
        if top is None or top in tried:
            continue
        tried.append(top)
        try:
            _git(top, "cat-file", "-e", f"{commit}^{{commit}}")
            return top
        except _GitError:
            continue
    where = ", ".join(tried) if tried else "no git repository at hand"
    raise CannotRebuild(f"commit {commit[:12]} is not in {where}")


def _extract_tar(data, dest):
    """Regular files, folders and symbolic links of `git archive`'s tar (names checked to stay inside dest)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            name = os.path.normpath(member.name)
            if name.startswith(("/", "..")) or name == ".":
                continue
            target = os.path.join(dest, name)
            if member.isdir():
                os.makedirs(target, exist_ok=True)
            elif member.isfile():
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(tar.extractfile(member).read())
                os.chmod(target, 0o755 if member.mode & 0o111 else 0o644)
            elif member.issym():
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.symlink(member.linkname, target)


def _tree_files(root, all_files):
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if all_files or is_project_source(rel):
                files[rel] = os.readlink(full).encode() if os.path.islink(full) else _read(full)
    return files


def read_files(code_dir, skip=()):
    files = {}
    for dirpath, _, names in os.walk(code_dir):
        for name in names:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, code_dir).replace(os.sep, "/")
            if rel not in skip:
                files[rel] = _read(full)
    return files


def _apply_patch(tree, patch_path):
    """`git apply` in a folder outside any repository (the ceiling keeps git from finding one above it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(os.path.abspath(tree))
    try:
        proc = subprocess.run(["git", "apply", "--whitespace=nowarn", os.path.abspath(patch_path)], cwd=tree,
                              env=env, capture_output=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as err:
        raise CannotRebuild(f"git apply: {err}") from None
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip().splitlines()
        raise CannotRebuild(f"{PATCH_FILE} does not apply to its commit ({message[0] if message else 'git apply'})")


def rebuild_code_dir(code_dir, repos=(), all_files=False):
    """({path: bytes}, repository used or None) of the sources a backup folder stands for: for git.json + patch,
    the commit's project sources (every file with all_files) with the patch applied and the copied files over
    them; for a full copy, its files. CannotRebuild when the commit is in none of `repos`."""
    record = read_record(code_dir)
    if record is None:
        return read_files(code_dir), None
    commit, prefix = record["commit"], record.get("prefix", "")
    repo = find_repo(commit, list(repos))
    tmp = tempfile.mkdtemp(prefix="gptlab-rebuild-")
    try:
        tree = os.path.join(tmp, "tree")
        os.makedirs(tree)
        try:
            _extract_tar(_git(repo, "archive", "--format=tar", f"{commit}:{prefix}"), tree)
        except _GitError as err:
            raise CannotRebuild(f"cannot read commit {commit[:12]} in {repo} ({err})") from None
        for rel in record.get("research_files", RESEARCH_FILES):  # the copies below stand for these
            path = os.path.join(tree, rel)
            if os.path.lexists(path) and (os.path.lexists(os.path.join(code_dir, rel))
                                          or rel not in record.get("at_commit", [])):
                os.remove(path)
            elif os.path.isfile(path) and _sha256(_read(path)) != record.get("sha256", {}).get(rel):
                raise CannotRebuild(f"{rel} in commit {commit[:12]} is not the file {GIT_FILE} recorded")
        patch_path = os.path.join(code_dir, record.get("patch", PATCH_FILE))
        if not os.path.isfile(patch_path):
            raise CannotRebuild(f"{PATCH_FILE} is missing from {code_dir}")
        if _read(patch_path).strip():
            _apply_patch(tree, patch_path)
        files = _tree_files(tree, all_files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    files.update(read_files(code_dir, skip={GIT_FILE, IGNORE_FILE, record.get("patch", PATCH_FILE)}))
    return files, repo


def repo_candidates(run_dir, repo=None):
    """Where a run's commit is looked for: `repo`, the checkout recorded at backup, the repository holding the run
    folder, this project's checkout."""
    record_repo = None
    try:
        record_repo = (read_record(os.path.join(run_dir, CODE_DIR)) or {}).get("repo")
    except CannotRebuild:
        pass
    return [p for p in (repo, record_repo, os.path.abspath(run_dir), PROJECT_ROOT) if p]


def rebuild_sources(run_dir, repo=None, all_files=False):
    """{path: bytes}: the sources run_dir's code/ backup stands for (see rebuild_code_dir), its commit looked up in
    `repo`, then the checkout the run recorded, the repository holding run_dir, and this checkout."""
    return rebuild_code_dir(os.path.join(run_dir, CODE_DIR), repo_candidates(run_dir, repo), all_files)[0]


# ------------------------------------------------------------------------------------------------ older runs
def convert_full_copy(run_dir, repo_root, research_files=("train_gpt.py",), commit=None):
    """Turn an older run's full-copy code/ into git.json + uncommitted.patch + the research files, at the commit
    its config.json records (its '-dirty' suffix dropped; the patch then carries the copy's differences from the
    commit's project sources, and a project source of the commit that the copy lacks counts as deleted).

    The new folder is written beside code/ first and rebuilt; only when the rebuild gives back every file of the
    copy byte for byte does it replace code/. Returns {"commit", "patch_lines", "files_before", "files_after"}."""
    code_dir = os.path.join(run_dir, CODE_DIR)
    old = read_files(code_dir)
    if GIT_FILE in old:
        raise UserError(f"{code_dir} is already in the commit + patch layout")
    if commit is None:
        with open(os.path.join(run_dir, CONFIG_FILE)) as f:
            commit = json.load(f).get("git_commit")
        if not commit:
            raise UserError(f"{run_dir}/{CONFIG_FILE} records no git_commit")
    commit = commit.removesuffix("-dirty")
    try:
        repo = find_repo(commit, [repo_root])
    except CannotRebuild as err:
        raise UserError(str(err)) from None
    commit = _git(repo, "rev-parse", "--verify", f"{commit}^{{commit}}").decode().strip()
    prefix = _git(repo_root, "rev-parse", "--show-prefix").decode().strip()
    git_dir = _git(repo, "rev-parse", "--absolute-git-dir").decode().strip()
    treeish = f"{commit}:{prefix}"
    tmp = tempfile.mkdtemp(prefix="gptlab-convert-")
    new_dir = code_dir + ".new"
    try:
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        _extract_tar(_git(repo, "archive", "--format=tar", treeish), work)
        at_commit = set(_tree_files(work, all_files=False))
        copy_sources = {rel for rel in old if rel != TOKENIZER_SCRIPT and rel not in research_files}
        for rel in at_commit - copy_sources - set(research_files):
            os.remove(os.path.join(work, rel))  # not in the copy: absent when the run started
        for rel in copy_sources:
            os.makedirs(os.path.dirname(os.path.join(work, rel)), exist_ok=True)
            with open(os.path.join(work, rel), "wb") as f:
                f.write(old[rel])
        env = {"GIT_DIR": git_dir, "GIT_WORK_TREE": work}
        patch = _diff_against(work, env, treeish, os.path.join(tmp, "index"),
                              sorted(copy_sources - at_commit), list(research_files))
        copied_whole = sorted(rel for rel in research_files if rel in old)
        record = {"format": BACKUP_FORMAT, "commit": commit, "prefix": prefix, "research_files": list(research_files),
                  "copied_whole": copied_whole, "patch": PATCH_FILE, "patch_lines": patch.count(b"\n"),
                  "patch_leaves_out": [d + "/" for d in PATCH_EXCLUDED_DIRS] + list(research_files),
                  "new_files_in_patch": sorted(copy_sources - at_commit),
                  "converted": f"from the run's full copy of {len(old)} files; rebuilding commit + patch + "
                               "copies gave back each of them byte for byte",
                  "rebuild": "python -m gptlab.train.code_backup RUN_DIR OUT_DIR"}
        new = {rel: old[rel] for rel in copied_whole + [TOKENIZER_SCRIPT] if rel in old}
        new[PATCH_FILE] = patch
        new[GIT_FILE] = (json.dumps(record, indent=2) + "\n").encode()
        _write_all(new_dir, new)
        rebuilt, _ = rebuild_code_dir(new_dir, [repo])
        if rebuilt != old:
            differ = sorted(set(rebuilt) ^ set(old)) + sorted(r for r in set(rebuilt) & set(old)
                                                               if rebuilt[r] != old[r])
            raise UserError(f"{run_dir}: the rebuilt sources differ from the copy ({', '.join(differ[:5])}); "
                            "code/ left as it was")
        old_dir = code_dir + ".old"
        os.rename(code_dir, old_dir)
        os.rename(new_dir, code_dir)
        shutil.rmtree(old_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(new_dir, ignore_errors=True)
    return {"commit": commit, "patch_lines": record["patch_lines"], "files_before": sorted(old),
            "files_after": sorted(new)}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--by-reference"] and len(argv) > 1:
        for run_dir in argv[1:]:
            at_commit = record_by_reference(run_dir)
            print(f"{run_dir}: sha256s recorded; {', '.join(at_commit) or 'no copy'} held by the commit, "
                  f"{CODE_DIR}/{IGNORE_FILE} written")
        return
    if len(argv) != 2 or argv[0].startswith("-"):
        raise UserError("usage: python -m gptlab.train.code_backup RUN_DIR OUT_DIR (OUT_DIR must not exist), or "
                        "--by-reference RUN_DIR...")
    run_dir, out_dir = argv
    if not os.path.isdir(os.path.join(run_dir, CODE_DIR)):
        raise UserError(f"{run_dir} has no {CODE_DIR}/ backup")
    if os.path.exists(out_dir):
        raise UserError(f"{out_dir} already exists; choose a new folder")
    try:
        files = rebuild_sources(run_dir)
    except CannotRebuild as err:
        raise UserError(f"cannot rebuild {run_dir}: {err}") from None
    _write_all(out_dir, files)
    print(f"{len(files)} files written to {out_dir}")


if __name__ == "__main__":
    run_cli(main)
