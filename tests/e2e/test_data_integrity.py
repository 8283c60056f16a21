"""Data that cannot change under a run (issue 24, items 1, 2, 22, 25): a training run reads the shards it started
with or stops with one error naming the shard; validation rows are read once; writers of a shard folder lock it
beside the folder, on its own filesystem, whatever their $TMPDIR; train_gpt.py refuses a folder being written;
atomic_write's temporary file cannot be planted."""
import json
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, run_script
from gptlab.core.errors import UserError
from gptlab.core.files import atomic_write
from gptlab.dataset import fineweb
from gptlab.dataset import loader as data_loader
from gptlab.dataset import shards
from gptlab.dataset.selection import select_run_shards
from helpers.tiny_runs import only_run_dir, tiny_args

sys.path.insert(0, REPO)
import train_gpt  # noqa: E402

FINEWEB_150 = os.path.join(REPO, "data", "sample", "fineweb_edu_150docs.jsonl")


def make_folder(tiny, out, seed=0):
    """A real download_fineweb.py folder (manifest with sha256 per shard): 4 train shards of 3000 tokens."""
    import download_fineweb

    return download_fineweb.main(["--quiet", "--input", FINEWEB_150, "--tokenizer", tiny["tokenizer"],
                                  "--num_shards", "4", "--shard_size", "3000", "--val_tokens", "6000",
                                  "--seed", str(seed), "--out", str(out)])


@pytest.fixture(scope="module")
def folders(tiny, tmp_path_factory):
    """Two folders of the same layout and sizes, made with seeds 0 and 1 (other text in every shard)."""
    base = tmp_path_factory.mktemp("folders")
    a, b = make_folder(tiny, base / "a"), make_folder(tiny, base / "b", seed=1)
    return a, b


def copy_folder(src, dst):
    shutil.copytree(src, dst)
    return str(dst)


def at_step(monkeypatch, step, action):
    """Run `action()` just before the loader serves step `step` (1-based) of the run."""
    real = data_loader.BOSAlignedLoader.next_batch
    calls = {"n": 0}

    def next_batch(self):
        calls["n"] += 1
        if calls["n"] == step:
            action()
        return real(self)

    monkeypatch.setattr(data_loader.BOSAlignedLoader, "next_batch", next_batch)


def replace_with(path, content):
    """Rebuild one file as download_fineweb.py --overwrite does: written aside, renamed over it."""
    with open(path + ".new", "wb") as f:
        f.write(content)
    os.replace(path + ".new", path)


def run_args(tiny, tmp_path, folder, **overrides):
    return tiny_args(tiny, tmp_path / "exps", train_files=os.path.join(folder, "train_*.bin"),
                     val_files=os.path.join(folder, "val_*.bin"), **overrides)


# ------------------------------------------------------------------------------------------- item 1: shards
@pytest.mark.parametrize("how", ["renamed over", "in place"])
def test_a_train_shard_rebuilt_mid_run_stops_the_run_naming_it(tiny, folders, tmp_path, monkeypatch, how):
    """A shard the loader has not reached yet is replaced by another seed's shard of the same size: the run stops
    with one error naming it (its sha256 and the manifest's), recorded as failed, instead of training on it."""
    folder = copy_folder(folders[0], tmp_path / "data")
    victim = os.path.join(folder, "train_000002.bin")
    other = open(os.path.join(folders[1], "train_000002.bin"), "rb").read()
    assert len(other) == os.path.getsize(victim) and other != open(victim, "rb").read()

    def rebuild():
        if how == "renamed over":
            replace_with(victim, other)
        else:
            with open(victim, "r+b") as f:
                f.write(other)

    at_step(monkeypatch, 2, rebuild)  # 1024 tokens a step, 3000 a shard: shard 2 is reached at step 3
    with pytest.raises(UserError) as info:
        train_gpt.main(run_args(tiny, tmp_path, folder))
    message = str(info.value)
    assert f"{victim} changed since the run started" in message and "the manifest says" in message, message
    assert "\n" not in message
    results = json.load(open(os.path.join(only_run_dir(tmp_path / "exps"), "results.json")))
    assert results["status"] == "failed" and "train_000002.bin" in results["error"]


def test_a_shard_that_never_matched_its_manifest_is_caught_when_read(tiny, folders, tmp_path):
    """Two writers mixing a folder (item 2): a shard whose bytes are not the manifest's stops the run when the
    loader reaches it (train_gpt.py used to check headers only)."""
    folder = copy_folder(folders[0], tmp_path / "data")
    shutil.copy(os.path.join(folders[1], "train_000001.bin"), os.path.join(folder, "train_000001.bin"))
    with pytest.raises(UserError, match=r"train_000001\.bin changed since the run started \(sha256 [0-9a-f]+\.\.\., "
                                        r"the manifest says [0-9a-f]+\.\.\.\)"):
        train_gpt.main(run_args(tiny, tmp_path, folder, train_steps=2))


def test_validation_rows_are_read_once_at_start(tiny, folders, tmp_path):
    """The validation set rewritten between two evaluations: the second sees the same tokens as the first."""
    folder = copy_folder(folders[0], tmp_path / "data")
    val = os.path.join(folder, "val_000000.bin")
    val_set = data_loader.ValidationSet([val], 128, 8)
    first = [(x.copy(), y.copy()) for x, y in val_set.batches(3)]
    replace_with(val, open(os.path.join(folders[1], "val_000000.bin"), "rb").read()[:os.path.getsize(val)])
    with open(val, "r+b") as f:  # and in place, for good measure
        f.seek(shards.HEADER_BYTES)
        f.write(b"\x01\x00" * 500)
    second = list(val_set.batches(3))
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(first, second))
    assert len(first) == len(second) == 3


def test_validation_rewritten_mid_run_does_not_change_the_val_loss(tiny, folders, tmp_path, monkeypatch):
    folder = copy_folder(folders[0], tmp_path / "data")
    flags = dict(train_steps=4, val_loss_every=2)
    reference = train_gpt.main(run_args(tiny, tmp_path / "ref", folder, **flags))
    val = os.path.join(folder, "val_000000.bin")
    other = open(os.path.join(folders[1], "val_000000.bin"), "rb").read()
    at_step(monkeypatch, 4, lambda: replace_with(val, other))  # after the evaluation at step 2
    disturbed = train_gpt.main(run_args(tiny, tmp_path / "disturbed", folder, **flags))
    assert reference["final_val_loss"] == disturbed["final_val_loss"], (reference, disturbed)


def test_a_folder_symlink_flipped_mid_run_does_not_switch_the_data(tiny, folders, tmp_path):
    """Paths are resolved when the run starts: a link flipped to another folder changes nothing the run reads;
    the old folder then removed is an error naming the shard, not the other folder's data."""
    a = copy_folder(folders[0], tmp_path / "a")
    link = tmp_path / "current"
    link.symlink_to(a)
    paths = [os.path.join(link, f"train_{i:06d}.bin") for i in range(1, 5)]
    run = select_run_shards(paths, [os.path.join(link, "val_000000.bin")], "x", None, tiny["n_vocab"])
    flipped = data_loader.BOSAlignedLoader(paths, 128, 1024, tiny["eot"], prints=run.train_prints)
    straight = data_loader.BOSAlignedLoader([os.path.join(a, os.path.basename(p)) for p in paths], 128, 1024,
                                            tiny["eot"])
    link.unlink()
    link.symlink_to(folders[1])
    for _ in range(12):
        assert all(np.array_equal(p[0], q[0]) for p, q in zip(flipped.next_batch(), straight.next_batch()))
    shutil.rmtree(a)
    with pytest.raises(UserError, match=r"train_0000\d\d\.bin changed since the run started \(.* is gone\)"):
        for _ in range(30):
            flipped.next_batch()


def test_shards_without_a_manifest_checksum_are_checked_too(tiny, tmp_path):
    """Hand-made shards (no manifest): the size, first and last MiB and the file's identity at start; a change in
    the middle of a large shard is caught whether the file is replaced or rewritten in place."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 300, size=1_500_000).astype(np.uint16)  # 3 MB: more than the two sampled MiB
    tokens[::97] = tiny["eot"]
    for how in ("renamed over", "in place"):
        folder = tmp_path / how.replace(" ", "_")
        path = shards.write_shard(str(folder / "train_000001.bin"), tokens)
        loader = data_loader.BOSAlignedLoader([path], 128, 1024, tiny["eot"])
        changed = tokens.copy()
        changed[750_000] += 1
        data = open(path, "rb").read()
        new = data[:shards.HEADER_BYTES] + changed.tobytes()
        if how == "renamed over":
            replace_with(path, new)
        else:
            with open(path, "r+b") as f:
                f.write(new)
        with pytest.raises(UserError, match="train_000001.bin changed since the run started"):
            loader.next_batch()


# ------------------------------------------------------------------------------------------- items 2, 22: locks
def cli(args, **kwargs):
    return run_script([os.path.join(REPO, "download_fineweb.py"), "--quiet"] + [str(a) for a in args], **kwargs)


def writer_args(tiny, out, *extra):
    return ["--input", FINEWEB_150, "--tokenizer", tiny["tokenizer"], "--num_shards", 4, "--shard_size", 3000,
            "--val_tokens", 6000, "--out", out, *extra]


def folder_of(tiny, out):
    stem = os.path.splitext(os.path.basename(tiny["tokenizer"]))[0]
    return os.path.join(str(out), f"local_fineweb_edu_150docs_{stem}")


def test_writers_with_different_tmpdirs_exclude_each_other(tiny, tmp_path):
    """Two containers or hosts sharing the data volume: the lock is beside the folder, not under $TMPDIR."""
    out = tmp_path / "volume"
    out_dir = folder_of(tiny, out)
    other_tmp = tmp_path / "other_tmp"
    other_tmp.mkdir()
    with fineweb.shard_folder_lock(out_dir, 0, 1):  # this process: the first writer, mid-run
        proc = cli(writer_args(tiny, out), env_extra={"TMPDIR": str(other_tmp)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert (f"error: shard folder {out_dir} is being written by pid {os.getpid()} on {socket.gethostname()}"
            in proc.stderr), proc.stderr
    assert shards.writer_lock_path(out_dir, 0) in proc.stderr and "delete that file" in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert not os.path.exists(out_dir)
    proc = cli(writer_args(tiny, out), env_extra={"TMPDIR": str(other_tmp)})
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(out)) == [os.path.basename(out_dir)]  # no lock file left beside it


@pytest.mark.parametrize("held, theirs", [((1, 2), ["--world_size", 1]), ((0, 1), ["--rank", 1, "--world_size", 2]),
                                          ((0, 2), ["--world_size", 1])])
def test_a_single_writer_and_a_rank_of_a_split_job_exclude_each_other(tiny, tmp_path, held, theirs):
    out = tmp_path / "volume"
    out_dir = folder_of(tiny, out)
    with fineweb.shard_folder_lock(out_dir, *held):
        proc = cli(writer_args(tiny, out, *theirs))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"error: shard folder {out_dir}") and f"pid {os.getpid()}" in proc.stderr
    assert not os.path.exists(out_dir)


def test_ranks_of_one_split_job_write_side_by_side(tiny, tmp_path):
    out = tmp_path / "volume"
    out_dir = folder_of(tiny, out)
    with fineweb.shard_folder_lock(out_dir, 0, 2):
        proc = cli(writer_args(tiny, out, "--rank", 1, "--world_size", 2))
    assert proc.returncode == 0, proc.stderr
    assert "manifest.rank1.json" in os.listdir(out_dir)


def test_train_gpt_refuses_a_folder_being_written(tiny, folders, tmp_path):
    folder = copy_folder(folders[0], tmp_path / "data")
    with fineweb.shard_folder_lock(folder, 0, 1):
        with pytest.raises(UserError) as info:
            train_gpt.main(run_args(tiny, tmp_path, folder))
    message = str(info.value)
    assert f"shard folder {folder} is being written by pid {os.getpid()} on {socket.gethostname()}" in message
    assert not (tmp_path / "exps").exists() or not os.listdir(tmp_path / "exps")
    # the same from the command line: one error line, status 2
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from gptlab.dataset.fineweb import shard_folder_lock\n"
        "with shard_folder_lock(sys.argv[2], 1, 2):\n    print('locked', flush=True); time.sleep(600)"),
        REPO, folder], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = run_script([os.path.join(REPO, "train_gpt.py"), *run_args(tiny, tmp_path, folder)])
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert f"is being written by pid {holder.pid}" in proc.stderr
    finally:
        holder.kill()
        holder.wait()
    # a killed writer frees the folder at once (its lock file may stay behind)
    train_gpt.main(run_args(tiny, tmp_path / "after", folder, train_steps=2))


def test_a_lock_file_left_by_a_killed_writer_does_not_block(tiny, folders, tmp_path):
    folder = copy_folder(folders[0], tmp_path / "data")
    lock = shards.writer_lock_path(folder, 0)
    with open(lock, "w") as f:  # what kill -9 leaves: the file, with nobody holding it
        json.dump({"pid": 999999, "host": socket.gethostname(), "command": "download_fineweb.py", "since": "x",
                   "rank": 0, "world_size": 1}, f)
    assert shards.writer_locks(folder) == {}
    train_gpt.main(run_args(tiny, tmp_path, folder, train_steps=2))
    with fineweb.shard_folder_lock(folder, 0, 1):
        pass


# ------------------------------------------------------------------------------------------- item 25: atomic_write
def test_atomic_write_does_not_follow_a_planted_temporary_name(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "out" / "file.bin"
    target.parent.mkdir()
    for name in (f"file.bin.tmp.{os.getpid()}", "file.bin.tmp", f".file.bin.tmp.{os.getpid()}"):
        (target.parent / name).symlink_to(victim)
    with atomic_write(str(target), "wb") as f:
        f.write(b"new content")
    assert victim.read_text() == "precious"
    assert target.read_bytes() == b"new content" and not target.is_symlink()
    umask = os.umask(0o022)
    os.umask(umask)
    assert (target.stat().st_mode & 0o777) == 0o666 & ~umask
    leftovers = sorted(n for n in os.listdir(target.parent) if n != "file.bin")
    assert all((target.parent / n).is_symlink() for n in leftovers) and len(leftovers) == 3


def test_atomic_write_temporary_names_are_unpredictable(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (seen.append(src), real_replace(src, dst)))
    for _ in range(2):
        with atomic_write(str(tmp_path / "f"), "w", overwrite=True) as f:
            f.write("x")
    assert len(set(seen)) == 2 and all(os.path.basename(s).startswith("f.tmp.") for s in seen)
