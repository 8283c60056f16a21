"""The tools that use a model, on bad input (issue 24), as a user runs them: crafted checkpoints in sample.py,
export_hf.py, the evaluation and --resume; export_hf.py into a symbolic link and onto a full disk; sample.py's
number flags; HellaSwag rows of any length and --hellaswag_path naming something that is not a file. Each ends with
one `error:` line and status 2, no traceback, nothing half-written. In-process checks: tests/unit/test_use_faults.py."""
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys

import pytest
import torch

from conftest import REPO, SHARED_DATA, _drop_root_file_access, run_script, run_scripts
from helpers.sample_checkpoint import checkpoint  # noqa: F401 (a fixture)

from gptlab.checkpoint.format import payload_sha256

pytestmark = [pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout"),
              pytest.mark.usefixtures("one_torch_thread")]


def one_error(proc, *phrases):
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


def craft(src, dst, change, resign=True):
    payload = torch.load(src, weights_only=True)
    change(payload)
    if resign:
        payload["sha256"] = payload_sha256(payload)
    torch.save(payload, dst)
    return str(dst)


def _flip_and_say_format_1(payload):
    payload["model"]["embed.weight"].view(torch.int32)[0, 0] ^= 1 << 20
    payload["format_version"] = 1


CRAFTED = {
    "flipped weight, format_version 1": (_flip_and_say_format_1, False, "damaged"),
    "no model_config": (lambda p: p.pop("model_config"), True, "'model_config'"),
    "args a list": (lambda p: p.update(args=["tokenizer"]), True, "'args'"),
    "float64 weight": (lambda p: p["model"].update({"embed.weight": p["model"]["embed.weight"].double()}), True,
                       "embed.weight"),
    "num_layers 10**6": (lambda p: p["model_config"].update(num_layers=10**6), True, "far larger"),
}


@pytest.fixture(scope="module")
def crafted(checkpoint, tmp_path_factory):
    ckpt, _ = checkpoint
    folder = tmp_path_factory.mktemp("crafted")
    return {name: (craft(ckpt, folder / f"c{i}.pt", change, resign), phrase)
            for i, (name, (change, resign, phrase)) in enumerate(CRAFTED.items())}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_a_crafted_checkpoint_is_one_error_in_every_tool(crafted, tmp_path, name):
    path, phrase = crafted[name]
    out = tmp_path / "hf"
    for proc in run_scripts([["sample.py", path, "--max_tokens", "3"], ["export_hf.py", path, str(out), "--no-check"],
                             ["-m", "gptlab.evals.checkpoint", path, "--hellaswag_limit", "0"],
                             ["train_gpt.py", "--resume", path, "--experiments_dir", str(tmp_path / "exps")]]):
        one_error(proc, phrase, path)
    assert not out.exists() and not (tmp_path / "exps").exists()


def test_export_into_a_symbolic_link_is_refused_and_leaves_nothing(checkpoint, tmp_path):
    ckpt, _ = checkpoint
    target = tmp_path / "real"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(target)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    for out, extra in ((link, ["--overwrite"]), (link, []), (dangling, []), (dangling, ["--overwrite"])):
        one_error(run_script(["export_hf.py", ckpt, str(out), "--no-check"] + extra), "symbolic link", str(out))
    assert sorted(os.listdir(tmp_path)) == ["dangling", "link", "real"]
    assert os.listdir(target) == ["keep.txt"] and os.readlink(link) == str(target)


def test_export_on_a_full_disk_is_one_error_and_leaves_nothing(checkpoint, tmp_path):
    """The disk fills while model.safetensors is written (RLIMIT_FSIZE: EFBIG past 64 kB, as a full disk's
    ENOSPC): one error, no OUT_DIR, no temporary folder; with --overwrite the old folder stays whole."""
    pytest.importorskip("safetensors")
    ckpt, _ = checkpoint
    out = tmp_path / "hf"

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
        if os.geteuid() == 0:
            _drop_root_file_access()

    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=REPO)

    def export(*extra):
        return subprocess.run([sys.executable, "export_hf.py", ckpt, str(out), "--no-check", *extra], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=300, preexec_fn=limit)

    one_error(export(), f"could not write {out}", "File too large", "Nothing half-written")
    assert os.listdir(tmp_path) == []
    out.mkdir()
    (out / "config.json").write_text("{}")
    one_error(export("--overwrite"), f"could not write {out}")
    assert sorted(os.listdir(tmp_path)) == ["hf"] and os.listdir(out) == ["config.json"]


def test_an_export_follows_the_umask_and_overwrite_never_deletes_what_it_reads(checkpoint, tmp_path):
    """Issue 37, item 10 (docs/faults.md): the folder was 0700 while its files were 0644; both now get what
    `mkdir` and `open` give under the umask (027 here: 0750 and 0640). --overwrite of the current folder, or of a
    folder holding the checkpoint, is one error that leaves it whole and nothing beside it (`.` left an empty
    NAME.old.* folder)."""
    pytest.importorskip("safetensors")
    ckpt, _ = checkpoint
    out = tmp_path / "hf"
    # export_hf.py run under umask 027, as a shell with `umask 027` would start it
    umask_027 = f"import os, runpy, sys; os.umask(0o027); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], " \
                "run_name='__main__')"
    proc = run_script(["-c", umask_027, "export_hf.py", ckpt, str(out), "--no-check"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o750
    assert {name: stat.S_IMODE(os.stat(out / name).st_mode) for name in os.listdir(out)} == {
        name: 0o640 for name in os.listdir(out)} and "model.safetensors" in os.listdir(out)

    here = tmp_path / "here"
    here.mkdir()
    (here / "keep.txt").write_text("mine")
    inside = tmp_path / "run"
    inside.mkdir()
    held = inside / "step_000010.pt"
    shutil.copyfile(ckpt, held)
    for args, cwd, phrase in ((["export_hf.py", ckpt, ".", "--overwrite"], here, "the current folder"),
                              (["export_hf.py", held, inside, "--overwrite"], REPO, str(held))):
        one_error(run_script([os.path.join(REPO, args[0])] + args[1:], cwd=cwd), f"is or holds {phrase}")
    assert sorted(os.listdir(tmp_path)) == ["here", "hf", "run"]
    assert os.listdir(here) == ["keep.txt"] and os.listdir(inside) == ["step_000010.pt"]


@pytest.mark.parametrize("flags", [["--temperature", "nan"], ["--seed", str(10**23)], ["--temperature", "-0.5"]])
def test_sample_refuses_a_number_it_cannot_use(checkpoint, flags):
    ckpt, _ = checkpoint
    one_error(run_script(["sample.py", ckpt] + flags), flags[0])


def test_sample_with_a_tiny_temperature_is_greedy(checkpoint):
    ckpt, _ = checkpoint
    runs = [run_script(["sample.py", ckpt, "--prompt", "The", "--max_tokens", "12", "--temperature", t], check=True)
            for t in ("1e-45", "0")]
    assert runs[0].stdout == runs[1].stdout


def test_download_hellaswag_refuses_an_infinite_timeout(tmp_path):
    for value in ("inf", "1e300"):
        one_error(run_script(["download_hellaswag.py", "--timeout", value, "--out", str(tmp_path / "h.jsonl")]),
                  "--timeout")
    assert os.listdir(tmp_path) == []
