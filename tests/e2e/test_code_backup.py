"""gptlab.train.code_backup: the research files copied whole, the rest as git commit + uncommitted.patch (checked
with plain git on a fresh clone), a full copy outside git; compare_experiments.py --diff over both layouts."""
import hashlib
import json
import os
import shutil
import subprocess

import pytest

from conftest import REPO, run_script
from gptlab.core.errors import UserError
from gptlab.train import code_backup as cb

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
BINARY = bytes(range(256)) * 4  # NUL bytes: git treats it as binary

COMMITTED = {
    "train_gpt.py": "import model\nLR = 0.01\n\ndef train():\n    return LR\n",
    "model.py": "class GPT:\n    width = 128\n",
    "gptlab/__init__.py": "",
    "gptlab/layers.py": "def mlp(x):\n    return 4 * x\n",
    "gptlab/native.c": "int add(int a, int b) { return a + b; }\n",
    "requirements.txt": "torch\n",
    "README.md": "# lab\n",
    "tests/test_layers.py": "def test_mlp():\n    pass\n",
    "weights.bin": BINARY,
    "experiments/20260101_000000_Old/config.json": '{"seed": 0}\n',
    ".gitignore": "ignored_*.py\n/data/\n__pycache__/\n",
}


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, env=dict(os.environ, **GIT_ENV), check=True,
                          capture_output=True).stdout


def write(root, rel, content):
    path = os.path.join(root, *rel.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content if isinstance(content, bytes) else content.encode())


def tree_of(root, skip_top=(".git",)):
    """{relative path: bytes} of every file under root (top-level entries in skip_top left out)."""
    files = {}
    for dirpath, dirnames, names in os.walk(root):
        if dirpath == root:
            dirnames[:] = [d for d in dirnames if d not in skip_top]
        for name in names:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel not in skip_top:
                with open(full, "rb") as f:
                    files[rel] = f.read()
    return files


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A committed checkout whose own git config would break a naive `git diff` (no a/ b/ prefixes, colours,
    rename detection, an external diff tool)."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    root = str(tmp_path / "repo")
    for rel, content in COMMITTED.items():
        write(root, rel, content)
    git(root, "init", "-q")
    for key, value in [("diff.noprefix", "true"), ("diff.mnemonicPrefix", "true"), ("color.ui", "always"),
                       ("diff.renames", "copies"), ("diff.external", "false"), ("apply.whitespace", "error")]:
        git(root, "config", key, value)
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    return root


def make_dirty(root):
    """Every kind of change a checkout can hold when a run starts."""
    write(root, "model.py", "class GPT:\n    width = 192\n")                     # research file: copied whole
    write(root, "gptlab/layers.py", "def mlp(x):\n    return 3 * x  \n")         # tracked source (trailing space)
    write(root, "README.md", "# lab\n\nnotes\n")                                 # tracked, not a source
    write(root, "weights.bin", BINARY[::-1])                                     # tracked binary
    os.remove(os.path.join(root, "gptlab/native.c"))                             # tracked, deleted
    write(root, "gptlab/blocks/new_block.py", "def block():\n    pass\n")        # untracked source
    write(root, "helper.py", "print('helper')\n")                                # untracked top-level source
    write(root, "gptlab/staged.py", "STAGED = 1\n")                              # added to the index only
    git(root, "add", "gptlab/staged.py")
    write(root, "requirements.txt", "torch\nnumpy\n")                            # staged modification
    git(root, "add", "requirements.txt")
    write(root, "notes.txt", "scratch\n")                                        # untracked, not a source
    write(root, "ignored_scratch.py", "secret = 1\n")                            # ignored
    write(root, "data/x.py", "ignored too\n")                                    # ignored folder
    write(root, "gptlab/__pycache__/layers.cpython-311.pyc", b"\0pyc")           # ignored
    write(root, "experiments/20260101_000000_Old/config.json", '{"seed": 1}\n')  # runs: left out
    write(root, "experiments/20260102_000000_New/code/train_gpt.py", "x = 1\n")


def expected_tree(root):
    """What the run had, by hand: the worktree without .git, experiments/, ignored files and untracked
    non-sources."""
    files = tree_of(root, skip_top=(".git", "experiments", "data", "ignored_scratch.py", "notes.txt"))
    return {rel: data for rel, data in files.items() if "__pycache__" not in rel}


def test_git_checkout_research_files_whole_rest_as_commit_and_a_patch_git_applies(repo, tmp_path):
    make_dirty(repo)
    index_path = os.path.join(repo, ".git", "index")
    cached_before = git(repo, "--no-optional-locks", "diff", "--cached", "--no-ext-diff")
    status_before = git(repo, "--no-optional-locks", "status", "--porcelain")
    with open(index_path, "rb") as f:
        index_before = f.read()
    git_dir_before = sorted(os.listdir(os.path.join(repo, ".git")))
    run = str(tmp_path / "run")
    info = cb.backup_code(repo, run, "print('tokenizer trainer')\n")
    code = os.path.join(run, "code")

    head = git(repo, "rev-parse", "HEAD").decode().strip()
    assert sorted(os.listdir(code)) == [".gitignore", "git.json", "model.py", "tokenizer_train_script.py",
                                        "train_gpt.py", "uncommitted.patch"]
    for rel in ("train_gpt.py", "model.py"):
        with open(os.path.join(repo, rel), "rb") as a, open(os.path.join(code, rel), "rb") as b:
            assert a.read() == b.read()
    with open(os.path.join(code, "tokenizer_train_script.py")) as f:
        assert f.read() == "print('tokenizer trainer')\n"
    with open(os.path.join(code, "git.json")) as f:
        record = json.load(f)
    assert record["commit"] == head == info["git_commit"]
    with open(os.path.join(code, "uncommitted.patch"), "rb") as f:
        patch = f.read()
    assert info["patch_lines"] == patch.count(b"\n") > 0
    assert info["files"] == sorted(os.listdir(code))
    for absent in (b"experiments/", b"ignored_scratch", b"notes.txt", b"data/x.py", b"__pycache__",
                   b"train_gpt.py", b"model.py", b"\x1b["):
        assert absent not in patch, absent

    # plain git: a fresh clone of the commit, the patch applied, the copies laid over it = the run's tree
    fresh = str(tmp_path / "fresh")
    git(str(tmp_path), "clone", "-q", repo, fresh)
    git(fresh, "checkout", "-q", head)
    git(fresh, "apply", os.path.join(code, "uncommitted.patch"))
    for rel in ("train_gpt.py", "model.py"):
        shutil.copyfile(os.path.join(code, rel), os.path.join(fresh, rel))
    expected = expected_tree(repo)
    assert "gptlab/native.c" not in expected and "gptlab/blocks/new_block.py" in expected
    assert tree_of(fresh, skip_top=(".git", "experiments")) == expected
    with open(os.path.join(fresh, "experiments/20260101_000000_Old/config.json")) as f:
        assert f.read() == '{"seed": 0}\n'  # the run folder's change stayed out of the patch

    # the checkout is only read: the index, what is staged and the status are as they were, nothing left in .git
    with open(index_path, "rb") as f:
        assert f.read() == index_before
    assert git(repo, "--no-optional-locks", "diff", "--cached", "--no-ext-diff") == cached_before
    assert git(repo, "--no-optional-locks", "status", "--porcelain") == status_before
    assert sorted(os.listdir(os.path.join(repo, ".git"))) == git_dir_before

    # rebuilding from the backup gives the project sources of that tree
    rebuilt = cb.rebuild_sources(run)
    sources = {rel: data for rel, data in expected.items() if cb.is_project_source(rel)}
    assert rebuilt == dict(sources, **{"tokenizer_train_script.py": b"print('tokenizer trainer')\n"})
    assert set(sources) == {"train_gpt.py", "model.py", "helper.py", "gptlab/__init__.py", "gptlab/layers.py",
                            "gptlab/staged.py", "gptlab/blocks/new_block.py", "requirements.txt"}
    everything = cb.rebuild_sources(run, all_files=True)
    assert everything["weights.bin"] == BINARY[::-1] and everything["README.md"] == b"# lab\n\nnotes\n"


def test_a_clean_checkout_has_an_empty_patch_and_a_deleted_research_file_stays_deleted(repo, tmp_path):
    os.remove(os.path.join(repo, "model.py"))
    info = cb.backup_code(repo, str(tmp_path / "run"))
    code = tmp_path / "run" / "code"
    assert sorted(os.listdir(code)) == [".gitignore", "git.json", "tokenizer_train_script.py", "train_gpt.py",
                                        "uncommitted.patch"]
    assert (code / "uncommitted.patch").read_bytes() == b"" and info["patch_lines"] == 0
    assert (code / "tokenizer_train_script.py").read_text() == cb.NO_TOKENIZER_SCRIPT
    rebuilt = cb.rebuild_sources(str(tmp_path / "run"))
    assert "model.py" not in rebuilt and rebuilt["gptlab/native.c"] == COMMITTED["gptlab/native.c"].encode()
    with pytest.raises(UserError, match="already exists"):  # a run folder is written once
        cb.backup_code(repo, str(tmp_path / "run"))


@pytest.mark.parametrize("how", ["no .git", "no git program", "a damaged index"])
def test_outside_git_every_project_source_is_copied(repo, tmp_path, monkeypatch, how):
    make_dirty(repo)
    if how == "no .git":
        shutil.rmtree(os.path.join(repo, ".git"))
    elif how == "a damaged index":
        write(repo, ".git/index", b"DIRC garbage")
    else:
        empty = tmp_path / "bin"
        empty.mkdir()
        monkeypatch.setenv("PATH", str(empty))
    info = cb.backup_code(repo, str(tmp_path / "run"), "tok\n")
    code = tree_of(str(tmp_path / "run" / "code"))
    sources = ["train_gpt.py", "model.py", "helper.py", "ignored_scratch.py", "gptlab/__init__.py",
               "gptlab/layers.py", "gptlab/staged.py", "gptlab/blocks/new_block.py", "requirements.txt"]
    assert sorted(code) == sorted(sources + ["tokenizer_train_script.py"])
    for rel in sources:
        with open(os.path.join(repo, rel), "rb") as f:
            assert code[rel] == f.read()
    assert info["git_commit"] is None and info["patch_lines"] is None
    assert (info["git_error"] is not None) == (how == "a damaged index")
    assert cb.describe_backup(info).startswith(f"code backup: {len(sources) + 1} files copied (")


def make_run(root, name, repo, seed=0, tokenizer="tok\n"):
    path = os.path.join(root, name)
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"model_name": name.split("_")[-1], "seed": seed}, f)
    cb.backup_code(repo, path, tokenizer)
    return path


def full_copy_run(root, name, sources, seed=0):
    """A run folder in the older layout: every project source copied into code/."""
    path = os.path.join(root, name)
    for rel, content in dict(sources, **{"tokenizer_train_script.py": "tok\n"}).items():
        write(os.path.join(path, "code"), rel, content)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"model_name": name.split("_")[-1], "seed": seed}, f)
    return path


def diff(exps, a, b):
    proc = run_script(["compare_experiments.py", "--experiments", exps, "--diff", a, b])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def code_section(out):
    return out[out.index("== code (code/) =="):]


@pytest.fixture
def two_runs(repo, tmp_path):
    """Run A on the first commit, clean; then gptlab/layers.py committed with a change, model.py edited and a
    new gptlab file left uncommitted, and run B. The run folders live outside the checkout."""
    exps = str(tmp_path / "exps")
    os.makedirs(exps)
    make_run(exps, "20260101_000000_Base", repo)
    write(repo, "gptlab/layers.py", "def mlp(x):\n    return 3 * x\n")
    git(repo, "commit", "-qam", "narrower mlp")
    write(repo, "model.py", "class GPT:\n    width = 192\n")
    write(repo, "gptlab/blocks/new_block.py", "def block():\n    pass\n")
    make_run(exps, "20260102_000000_Wide", repo, seed=1)
    return exps


def test_diff_two_new_style_runs_rebuilds_both_trees(two_runs, repo):
    out = code_section(diff(two_runs, "Base", "Wide"))
    first, second = (c.decode().strip() for c in (git(repo, "rev-parse", "HEAD~1"), git(repo, "rev-parse", "HEAD")))
    assert f"A: model.py, train_gpt.py copied; the other 4 file(s) rebuilt from commit {first[:12]} " \
           "(no uncommitted changes)" in out
    assert f"B: model.py, train_gpt.py copied; the other 5 file(s) rebuilt from commit {second[:12]} " \
           "+ uncommitted.patch (" in out
    assert [line for line in out.splitlines() if line.startswith(("  changed:", "  added", "  removed"))] == [
        "  changed: gptlab/layers.py", "  changed: model.py", "  added in B: gptlab/blocks/new_block.py"]
    assert "--- A/code/model.py\n+++ B/code/model.py\n" in out and "-    width = 128\n+    width = 192\n" in out
    assert "--- A/gptlab/layers.py\n+++ B/gptlab/layers.py\n" in out
    assert "-    return 4 * x\n+    return 3 * x\n" in out
    same = code_section(diff(two_runs, "Base", "20260101_000000_Base"))
    assert "identical (7 files)" in same


OLD_COPY = {rel: COMMITTED[rel] for rel in ("train_gpt.py", "model.py", "gptlab/__init__.py", "gptlab/layers.py",
                                            "gptlab/native.c", "requirements.txt")}


def test_diff_old_full_copy_against_new_style_file_by_file(two_runs, repo):
    old = dict(OLD_COPY)
    full_copy_run(two_runs, "20251231_000000_Older", old)
    out = code_section(diff(two_runs, "Older", "Wide"))
    assert "A: full copy (7 files)" in out and "B: model.py, train_gpt.py copied" in out
    assert [line for line in out.splitlines() if line.startswith(("  changed:", "  added", "  removed"))] == [
        "  changed: gptlab/layers.py", "  changed: model.py", "  added in B: gptlab/blocks/new_block.py"]
    assert "--- A/code/gptlab/layers.py\n+++ B/gptlab/layers.py\n" in out
    # the same sources in either layout: nothing differs
    assert "identical (7 files)" in code_section(diff(two_runs, "Older", "Base"))
    old["gptlab/layers.py"] += "# edited before the run\n"
    full_copy_run(two_runs, "20251231_000001_Edited", old)
    out = code_section(diff(two_runs, "Base", "Edited"))
    assert "  changed: gptlab/layers.py" in out and "+# edited before the run\n" in out
    assert "  changed: model.py" not in out


def test_diff_without_the_commit_compares_commits_patches_and_copies(two_runs, repo):
    first, second = (c.decode().strip() for c in (git(repo, "rev-parse", "HEAD~1"), git(repo, "rev-parse", "HEAD")))
    shutil.rmtree(os.path.join(repo, ".git"))
    out = code_section(diff(two_runs, "Base", "Wide"))
    lines = [line for line in out.splitlines() if line.startswith("  cannot rebuild")]
    assert len(lines) == 1 and "sources of A and B" in lines[0] and f"({first} -> {second})" in lines[0]
    assert f"commit {first[:12]} is not in" in lines[0]
    assert [line for line in out.splitlines() if line.startswith(("  changed:", "  added", "  removed"))] == [
        "  changed: model.py", "  changed: uncommitted.patch"]
    assert "+diff --git a/gptlab/blocks/new_block.py b/gptlab/blocks/new_block.py\n" in out
    # an older full copy against a run that cannot be rebuilt: only what that run carries is compared
    full_copy_run(two_runs, "20251231_000000_Older", OLD_COPY)
    out = code_section(diff(two_runs, "Older", "Wide"))
    assert "A: full copy (7 files)" in out and f"cannot rebuild the sources of B (B: commit {second[:12]}" in out
    assert f"(none, a full copy -> {second})" in out
    assert [line for line in out.splitlines() if line.startswith(("  changed:", "  added", "  removed"))] == [
        "  changed: model.py", "  added in B: uncommitted.patch"]


def test_converting_a_full_copy_keeps_every_file_and_git_applies(repo, tmp_path):
    """An older run made from a dirty checkout: the copy becomes commit + patch + train_gpt.py, and both the
    rebuild and plain `git apply` on a fresh clone give back the copy's files byte for byte."""
    make_dirty(repo)
    head = git(repo, "rev-parse", "HEAD").decode().strip()
    sources = {rel: data for rel, data in expected_tree(repo).items() if cb.is_project_source(rel)}
    run = full_copy_run(str(tmp_path), "20251201_000000_Old", sources)
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump({"git_commit": head + "-dirty"}, f)
    before = tree_of(os.path.join(run, "code"))
    result = cb.convert_full_copy(run, repo)
    code = os.path.join(run, "code")
    assert sorted(os.listdir(code)) == ["git.json", "tokenizer_train_script.py", "train_gpt.py", "uncommitted.patch"]
    assert result["commit"] == head and result["patch_lines"] > 0
    assert cb.rebuild_sources(run, repo) == before
    fresh = str(tmp_path / "fresh")
    git(str(tmp_path), "clone", "-q", repo, fresh)
    git(fresh, "checkout", "-q", head)
    git(fresh, "apply", os.path.join(code, "uncommitted.patch"))
    shutil.copyfile(os.path.join(code, "train_gpt.py"), os.path.join(fresh, "train_gpt.py"))
    got = {rel: data for rel, data in tree_of(fresh).items() if cb.is_project_source(rel)}
    assert got == {rel: data for rel, data in before.items() if rel != "tokenizer_train_script.py"}
    with pytest.raises(UserError, match="already in the commit"):
        cb.convert_full_copy(run, repo)
    other = full_copy_run(str(tmp_path), "20251201_000001_Elsewhere", sources)
    with open(os.path.join(other, "config.json"), "w") as f:
        json.dump({"git_commit": "0" * 40}, f)
    with pytest.raises(UserError, match="is not in"):
        cb.convert_full_copy(other, repo)
    assert tree_of(os.path.join(other, "code")) == before  # left as it was


BASELINES = sorted(os.path.join(REPO, "experiments", d) for d in os.listdir(os.path.join(REPO, "experiments"))
                   if d.startswith("2026") and d.endswith("_Quickstart"))


def test_the_committed_baselines_rebuild_from_their_commit(tmp_path):
    assert len(BASELINES) == 3
    commits = set()
    for run in BASELINES:
        with open(os.path.join(run, "config.json")) as f:
            config_commit = json.load(f)["git_commit"]
        with open(os.path.join(run, "code", "git.json")) as f:
            record = json.load(f)
        assert record["commit"] == config_commit and record["copied_whole"] == ["model.py", "train_gpt.py"]
        commits.add(config_commit)
    (commit,) = commits
    if subprocess.run(["git", "cat-file", "-e", commit + "^{commit}"], cwd=REPO).returncode != 0:
        pytest.skip(f"commit {commit} is not in this checkout (a shallow clone?)")
    at_commit = subprocess.run(["git", "ls-tree", "-r", "-z", "--name-only", commit], cwd=REPO, check=True,
                               capture_output=True).stdout.decode().split("\0")
    sources = sorted(p for p in at_commit if p and cb.is_project_source(p))
    for run in BASELINES:
        # the repository holds their record, not copies of code its commit holds (code/.gitignore)
        tracked = subprocess.run(["git", "ls-files", "code"], cwd=run, check=True, capture_output=True, text=True)
        assert tracked.stdout.split() == ["code/.gitignore", "code/git.json", "code/uncommitted.patch"]
        rebuilt = cb.rebuild_sources(run)
        assert sorted(rebuilt) == sorted(sources + (["tokenizer_train_script.py"] if os.path.exists(
            os.path.join(run, "code", "tokenizer_train_script.py")) else []))
        for rel in ("train_gpt.py", "model.py"):  # trained from a clean clone: the commit's files exactly
            assert rebuilt[rel] == subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=REPO, check=True,
                                                  capture_output=True).stdout
    names = [os.path.basename(run)[:15] for run in BASELINES]  # seeds 0, 1, 2 in time order
    out = diff(os.path.join(REPO, "experiments"), names[0], names[1])
    assert f"identical ({len(sources)} files)" in out and "~ seed: 0 -> 1" in out  # (no tokenizer script in a clone)


def committed_part(repo, run):
    """The files of a run folder inside `repo` that `git add` takes (what a committed baseline holds)."""
    git(repo, "add", os.path.relpath(run, repo))
    listed = git(repo, "ls-files", "-z", "--", os.path.relpath(run, repo)).decode().split("\0")
    return sorted(os.path.relpath(os.path.join(repo, p), run) for p in listed if p)


def test_a_committed_run_holds_no_copy_of_code_its_commit_holds_and_reads_back_the_same(repo, tmp_path):
    """A run from a clean checkout, committed as a baseline: git takes its record (git.json: commit and every
    copy's sha256; the patch) and no copy of train_gpt.py, model.py or the tokenizer's script. Read back without
    the copies (a fresh clone), the tools see the same code: rebuilt sources, the research files' identity (the
    seed-group key), each file's bytes. A copy the commit does not hold (model.py edited) is committed."""
    run = os.path.join(repo, "experiments", "20260103_000000_Base")
    cb.backup_code(repo, run, "print('tokenizer trainer')\n")
    code = os.path.join(run, "code")
    before, identity = cb.rebuild_sources(run), cb.research_code(code)
    assert committed_part(repo, run) == ["code/.gitignore", "code/git.json", "code/uncommitted.patch"]
    with open(os.path.join(code, "git.json")) as f:
        record = json.load(f)
    assert record["at_commit"] == ["model.py", "train_gpt.py"]
    assert record["sha256"]["tokenizer_train_script.py"] == hashlib.sha256(b"print('tokenizer trainer')\n").hexdigest()
    for rel in ("train_gpt.py", "model.py", "tokenizer_train_script.py"):
        os.remove(os.path.join(code, rel))  # as a clone of the repository has it
    assert cb.rebuild_sources(run) == {rel: data for rel, data in before.items() if rel != "tokenizer_train_script.py"}
    assert cb.research_code(code) == identity
    assert cb.read_backup_file(code, "model.py") == COMMITTED["model.py"].encode()
    # a commit whose file is not the recorded one (history rewritten) is refused, not read as the run's
    record["sha256"]["model.py"] = "0" * 64
    with open(os.path.join(code, "git.json"), "w") as f:
        json.dump(record, f)
    with pytest.raises(cb.CannotRebuild, match="sha256 differs"):
        cb.read_backup_file(code, "model.py")

    write(repo, "model.py", "class GPT:\n    width = 192\n")
    edited = os.path.join(repo, "experiments", "20260103_000001_Wide")
    cb.backup_code(repo, edited)
    assert committed_part(repo, edited) == ["code/.gitignore", "code/git.json", "code/model.py",
                                            "code/uncommitted.patch"]


def test_an_older_backup_is_recorded_by_reference_before_it_is_committed(repo, tmp_path):
    """--by-reference on a backup made before code/.gitignore: the sha256s and at_commit are recorded and the same
    copies left out of the commit, the copies themselves untouched."""
    run = os.path.join(repo, "experiments", "20260104_000000_Older")
    cb.backup_code(repo, run, "print('tokenizer trainer')\n")
    code = os.path.join(run, "code")
    os.remove(os.path.join(code, ".gitignore"))
    with open(os.path.join(code, "git.json")) as f:
        record = json.load(f)
    older = {k: v for k, v in record.items() if k not in ("sha256", "at_commit")}
    with open(os.path.join(code, "git.json"), "w") as f:
        json.dump(older, f)
    copies = tree_of(code)
    proc = run_script(["-m", "gptlab.train.code_backup", "--by-reference", run], check=True)
    assert "model.py, train_gpt.py held by the commit" in proc.stdout
    with open(os.path.join(code, "git.json")) as f:
        assert json.load(f) == record
    assert {rel: data for rel, data in tree_of(code).items() if rel not in (".gitignore", "git.json")} == \
        {rel: data for rel, data in copies.items() if rel != "git.json"}
    assert committed_part(repo, run) == ["code/.gitignore", "code/git.json", "code/uncommitted.patch"]
