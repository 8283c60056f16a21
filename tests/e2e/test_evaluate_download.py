"""download_evals.py end to end against the stand-in Hub (tests/hub_standin.py) serving the real rows of
../shared/data/evals as parquet at each task's HUB_FILES, reached through HF_ENDPOINT with and without a path prefix.
Expectations: the written files equal the shared files byte for byte (their sha256 comes from SOURCES.md's copies,
not from our code), and damaged, truncated or changed downloads are refused by the task's name with nothing left."""
import os

import pytest

from conftest import run_script
from helpers.eval_tasks import EVALS_DIR, eval_repos, evals_standin, hub_path
from hub_standin import hub_env
from gptlab.evals import task_spec

SCRIPT = "download_evals.py"
TASKS = ["arc_easy", "copa", "piqa"]  # piqa: refs/convert/parquet; copa: a config's folder


def files_in(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def download(standin, tmp_path, tasks, *extra, **env):
    return run_script([SCRIPT, "--tasks", ",".join(tasks), "--data_dir", tmp_path / "evals", *extra],
                      env_extra=hub_env(standin, tmp_path / "hf_home", **env), timeout=300)


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
        assert files_in(tmp_path / "evals") == sorted(f"{n}.jsonl" for n in TASKS)
        assert standin.unknown() == []
        # again: verified files are kept, nothing fetched
        standin.clear_log()
        again = download(standin, tmp_path, TASKS)
        assert again.returncode == 0 and again.stdout.count("nothing to do") == len(TASKS)
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
    assert files_in(tmp_path / "evals") == ["arc_easy.jsonl"]  # the other task still came; no temporary file


def test_a_truncated_file_is_refused_by_name(tmp_path):
    repos = eval_repos(["copa"])
    path = hub_path(task_spec.load_task("copa"))
    data = repos["aps/super_glue"][path]
    repos["aps/super_glue"][path] = data[:len(data) // 2]
    standin = evals_standin(repos)
    try:
        proc = download(standin, tmp_path, ["copa"])
    finally:
        standin.stop()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: task copa:") and "damaged or truncated" in lines[0]
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
