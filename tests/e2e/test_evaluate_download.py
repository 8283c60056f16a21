"""download_evals.py end to end against the stand-in Hub (tests/hub_standin.py) serving the real rows of
../shared/data/evals as parquet at each task's HUB_FILES (and rows standing in for its few-shot split at its
FEWSHOT_FILES), reached through HF_ENDPOINT with and without a path prefix.
Expectations: the written files equal the shared files byte for byte (their sha256 comes from SOURCES.md's copies,
not from our code), the few-shot files the rows served, one json.dumps line each (docs/evals.md), and damaged,
truncated or changed downloads are refused by the task's name with nothing left."""
import hashlib
import json
import os

import pytest

from conftest import run_script
from helpers.eval_tasks import EVALS_DIR, eval_repos, evals_standin, fewshot_rows, hub_path, parquet_of
from hub_standin import hub_env
from gptlab.evals import task_spec

SCRIPT = "download_evals.py"
TASKS = ["arc_easy", "copa", "piqa"]  # piqa: refs/convert/parquet; copa: a config's folder


def json_lines(rows):
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def files_in(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def download(standin, tmp_path, tasks, *extra, **env):
    return run_script([SCRIPT, "--tasks", ",".join(tasks), "--data_dir", tmp_path / "evals", *extra],
                      env_extra=hub_env(standin, tmp_path / "hf_home", **env), timeout=300)


def refused_download(standin, tmp_path, tasks, *extra):
    """The one line of a download_evals.py run that must fail (status 2, no traceback, one `error:` line on
    stderr); the stand-in is stopped after it."""
    try:
        proc = download(standin, tmp_path, tasks, *extra)
    finally:
        standin.stop()
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.mark.parametrize("prefix", ["", "/mirror/hf"])
def test_downloads_the_real_rows_byte_for_byte(tmp_path, prefix):
    standin = evals_standin(eval_repos(TASKS), prefix=prefix)
    try:
        proc = download(standin, tmp_path, TASKS)
        assert proc.returncode == 0, proc.stderr
        for name in TASKS:
            with open(tmp_path / "evals" / f"{name}.jsonl", "rb") as f, \
                    open(os.path.join(EVALS_DIR, f"{name}.jsonl"), "rb") as g:
                assert f.read() == g.read(), name
            assert f"{name}.jsonl" in proc.stdout and "verified" in proc.stdout
            fewshot = (tmp_path / "evals" / f"{name}.fewshot.jsonl").read_bytes()
            assert fewshot == json_lines(fewshot_rows(name)), name
            assert f"sha256 {hashlib.sha256(fewshot).hexdigest()} (set FEWSHOT_SHA256 to pin it)" in proc.stdout
        assert files_in(tmp_path / "evals") == sorted([f"{n}.jsonl" for n in TASKS]
                                                      + [f"{n}.fewshot.jsonl" for n in TASKS])
        assert standin.unknown() == []
        # again: verified files are kept, and few-shot files that nothing pins too; nothing fetched
        standin.clear_log()
        again = download(standin, tmp_path, TASKS)
        assert again.returncode == 0 and again.stdout.count("nothing to do") == len(TASKS), again.stderr
        assert again.stdout.count("no checksum pins it, so it is kept") == len(TASKS)
        assert standin.bytes_by_file() == {}
        # offline from the HF cache the first run filled
        os.remove(tmp_path / "evals" / "copa.jsonl")
        offline = download(standin, tmp_path, ["copa"], HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
        assert offline.returncode == 0 and "offline" in offline.stdout, offline.stderr
    finally:
        standin.stop()


def test_a_changed_row_is_refused_by_name_and_nothing_is_written(tmp_path):
    standin = evals_standin(eval_repos(["copa", "arc_easy"], change=("copa", 50, "choice1", "Tampered.")))
    try:
        proc = download(standin, tmp_path, ["copa", "arc_easy"])
    finally:
        standin.stop()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "task copa:" in proc.stdout and "sha256" in proc.stdout and "nothing was written" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1].startswith("error: 1 of 2 tasks could not be downloaded: copa")
    # the other task still came (its few-shot rows too); no temporary file
    assert files_in(tmp_path / "evals") == ["arc_easy.fewshot.jsonl", "arc_easy.jsonl"]


def test_a_truncated_file_is_refused_by_name(tmp_path):
    repos = eval_repos(["copa"])
    path = hub_path(task_spec.load_task("copa"))
    data = repos["aps/super_glue"][path]
    repos["aps/super_glue"][path] = data[:len(data) // 2]
    line = refused_download(evals_standin(repos), tmp_path, ["copa"])
    assert line.startswith("error: task copa:") and "damaged or truncated" in line
    assert files_in(tmp_path / "evals") == []


def test_fewer_rows_fail_the_checksum(tmp_path):
    standin = evals_standin(eval_repos(["copa"], limit=99))
    try:
        proc = download(standin, tmp_path, ["copa"])
    finally:
        standin.stop()
    assert proc.returncode == 2 and "the 99 rows of aps/super_glue@main" in proc.stderr
    assert files_in(tmp_path / "evals") == []


def test_offline_without_the_cache_and_an_unknown_task(tmp_path):
    standin = evals_standin({})
    try:
        proc = download(standin, tmp_path, ["copa"], HF_HUB_OFFLINE="1")
        unknown = download(standin, tmp_path, ["copa", "no_such_task"])
    finally:
        standin.stop()
    assert proc.returncode == 2 and proc.stderr.count("error:") == 1 and "not in the HF cache" in proc.stderr
    assert unknown.returncode == 2 and "unknown task 'no_such_task'" in unknown.stderr
    assert "Traceback" not in proc.stderr + unknown.stderr and files_in(tmp_path / "evals") == []


def test_few_shot_rows_missing_on_the_hub_a_pinned_few_shot_checksum_and_no_fewshot(tmp_path):
    repos = eval_repos(["copa"], fewshot=False)
    standin = evals_standin(repos)
    try:
        proc = download(standin, tmp_path, ["copa"])
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: the few-shot rows of copa could not be downloaded")
        assert "--no_fewshot" in lines[0]
        assert "task copa (few-shot split train): aps/super_glue@main has no file matching FEWSHOT_FILES" in proc.stdout
        assert files_in(tmp_path / "evals") == ["copa.jsonl"]  # the scored rows came, verified
        skip = download(standin, tmp_path / "skip", ["copa"], "--no_fewshot")
        assert skip.returncode == 0 and files_in(tmp_path / "skip" / "evals") == ["copa.jsonl"], skip.stderr
    finally:
        standin.stop()
    # a task that pins its few-shot rows: the right sha256 verifies, another is refused and writes nothing
    served = fewshot_rows("copa")
    good = hashlib.sha256(json_lines(served)).hexdigest()
    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    source = open(task_spec.load_task("copa").path).read().replace('NAME = "copa"', 'NAME = "copa_pinned"')
    repos = eval_repos(["copa"])
    standin = evals_standin(repos)
    try:
        for sha, want in ((good, 0), ("0" * 64, 2)):
            (tasks_dir / "copa_pinned.py").write_text(source.replace("FEWSHOT_SHA256 = None", f'FEWSHOT_SHA256 = "{sha}"'))
            out = tmp_path / f"pinned_{want}"
            proc = download(standin, out, ["copa_pinned"], "--tasks_dir", tasks_dir)
            assert proc.returncode == want, proc.stderr
            names = files_in(out / "evals")
            if want == 0:
                assert names == ["copa_pinned.fewshot.jsonl", "copa_pinned.jsonl"]
                assert f"sha256 {good[:16]}... verified" in proc.stdout
            else:
                assert names == ["copa_pinned.jsonl"] and "FEWSHOT_SHA256 in" in proc.stdout
                assert "nothing was written" in proc.stdout
    finally:
        standin.stop()


def test_a_connection_dropped_midway_is_one_error_line_and_leaves_the_old_file(tmp_path):
    """huggingface_hub retries a cut download, logging "Trying to resume download..." each time: those lines went
    to stderr before the error line (docs/faults.md: one line)."""
    task = task_spec.load_task("copa")
    old = tmp_path / "evals" / "copa.jsonl"
    old.parent.mkdir()
    old.write_text("the old file\n")
    line = refused_download(evals_standin(eval_repos(["copa"]), cut={hub_path(task)}), tmp_path, ["copa"],
                            "--overwrite", "--no_fewshot")
    assert line.startswith("error: task copa: downloading copa/validation-")
    assert "; nothing was written; try again; behind a proxy" in line
    assert files_in(tmp_path / "evals") == ["copa.jsonl"] and old.read_text() == "the old file\n"


def test_a_file_listed_but_not_served_names_the_repository_and_revision_to_check(tmp_path):
    task = task_spec.load_task("copa")
    line = refused_download(evals_standin(eval_repos(["copa"]), gone={hub_path(task)}), tmp_path, ["copa"],
                            "--no_fewshot")
    assert line.endswith(f"nothing was written; the Hub answered HTTP 404: check HUB_REPO and REVISION in "
                             f"{task.path}")  # not a proxy's or a mirror's business
    assert files_in(tmp_path / "evals") == []


def test_rows_that_evaluate_would_refuse_are_never_written(tmp_path):
    """A task that pins no checksum (a user's, with SHA256 = None) wrote whatever the parquet held: a column of
    another type, a null, or files of other columns matched by one HUB_FILES were found only when evaluate.py read
    the file."""
    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    source = open(task_spec.load_task("copa").path).read().replace('NAME = "copa"', 'NAME = "copa_mine"')
    (tasks_dir / "copa_mine.py").write_text(source.replace('SHA256 = "', 'SHA256 = None  # "'))
    rows = fewshot_rows("copa")
    labels_as_text = [dict(r, label=str(r["label"])) for r in rows]  # a parquet column has one type: all of them
    one, two = "copa/validation-00000-of-00002.parquet", "copa/validation-00001-of-00002.parquet"  # HUB_FILES: both
    for k, (served, words) in enumerate([
            ({one: labels_as_text}, "row 1: column 'label' must be int, got str"),
            ({one: rows[:3] + [dict(rows[3], premise=None)] + rows[4:]}, "row 4: column 'premise' must be str, got "
                                                                          "null; if the dataset has nulls in that "
                                                                          "column, allow them in"),
            ({one: rows[:6], two: [dict(r, note="x") for r in rows[6:]]}, f"{two} of aps/super_glue has the columns "
                                                                            "premise, choice1, choice2, question, idx, "
                                                                            f"label, note, {one} has")]):
        repos = eval_repos(["copa"], fewshot=False)
        del repos["aps/super_glue"][hub_path(task_spec.load_task("copa"))]
        repos["aps/super_glue"].update({path: parquet_of(part) for path, part in served.items()})
        line = refused_download(evals_standin(repos), tmp_path / str(k), ["copa_mine"], "--tasks_dir", tasks_dir,
                                "--no_fewshot")
        assert line.startswith("error: task copa_mine: copa/validation-") and words in line, line
        assert "nothing was written" in line
        assert files_in(tmp_path / str(k) / "evals") == []


def test_a_hub_that_keeps_failing_the_listing_is_one_error_line_saying_to_wait(tmp_path):
    """huggingface_hub retries a 429 (and a 5xx) five times, logging each retry on stderr."""
    line = refused_download(evals_standin(eval_repos(["copa"]), listing_status=429), tmp_path, ["copa"])
    assert line.startswith("error: task copa: listing aps/super_glue@main")
    assert line.endswith("the Hub answered HTTP 429: try again later")
    assert files_in(tmp_path / "evals") == []
