"""A sharded checkpoint folder from a stranger runs none of its code (issue 37, item 1), and a full disk during a
sharded save ends as the one-file path does (item 4). Expectations from docs/faults.md: "Loading never runs a
stranger's code" (anything but tensors and DCP's own index classes is refused with one `error:` line that names
--trust_model_code, status 2) and "A full disk while checkpointing ends the run with one error and no
half-written file" (results.json `failed` with that line).

Each crafted folder is what an attacker can make: the manifest in checkpoint.pt recomputed for the new files (its
checksum too), so the manifest check passes and only the reading itself stands between the file and the code. The
code would create a marker file; the tests assert it does not exist.
"""
import json
import os
import pickle
import resource
import shutil
import subprocess

import pytest
import torch

from conftest import free_port, run_script
from helpers.tiny_runs import only_run_dir, tiny_args
from test_faults import assert_one_clear_error
from test_shard_params import FLAGS, torchrun
from gptlab.checkpoint import checkpointing, sharded_checkpoint
from gptlab.checkpoint.format import payload_sha256
from gptlab.train import records

INDEX, META = ".metadata", "checkpoint.pt"  # DCP's index and the bookkeeping with the manifest (docs/faults.md)
RUN_FLAGS = dict(FLAGS, train_steps=2, checkpoint_every=2, val_loss_every=0, hellaswag_limit=0, sample_tokens=0)


@pytest.fixture(scope="module")
def genuine(tiny, tmp_path_factory):
    """A 2-rank --shard_params run's checkpoint folder at step 2."""
    base = tmp_path_factory.mktemp("trust")
    torchrun(2, tiny_args(tiny, base / "run", shard_params=True, **RUN_FLAGS))
    return os.path.join(only_run_dir(base / "run"), records.CHECKPOINT_DIR, "step_000002")


class _RunsCode:
    """Unpickles as eval(expression): what a malicious pickle does (any callable would do)."""

    def __init__(self, expression):
        self.expression = expression

    def __reduce__(self):
        return eval, (self.expression,)


def _resign(folder):
    """Recompute the manifest in folder/checkpoint.pt for the files there now, and its checksum: what anyone who
    edits a folder can do."""
    meta_path = os.path.join(folder, META)
    payload = torch.load(meta_path, weights_only=True)
    payload["sharded"]["files"] = {name: sharded_checkpoint._file_record(os.path.join(folder, name))
                                   for name in sorted(os.listdir(folder)) if name != META}
    payload["sha256"] = payload_sha256(payload)
    os.remove(meta_path)
    torch.save(payload, meta_path)


def craft(genuine, folder, variant, marker):
    """A copy of the genuine folder whose loading would write `marker` if any of its pickles were run:
    reduce: .metadata is a pickle whose __reduce__ runs code; stealth: the same, then returns the genuine metadata
    (the tools would work and exit 0); bytes: .metadata is genuine DCP classes only, but lm_head.weight is a
    non-tensor entry whose bytes (a new .distcp file) DCP unpickles with torch.load(weights_only=False)."""
    shutil.copytree(genuine, folder)
    index = os.path.join(folder, INDEX)
    with open(index, "rb") as f:
        real = f.read()
    touch = f"open({str(marker)!r}, 'w').write('ran')"
    if variant == "reduce":
        data = pickle.dumps(_RunsCode(touch))
    elif variant == "stealth":
        data = pickle.dumps(_RunsCode(f"({touch}, __import__('pickle').loads({real!r}))[1]"))
    else:
        from torch.distributed.checkpoint.filesystem import _StorageInfo
        from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

        metadata = pickle.loads(real)
        key = "model.lm_head.weight"
        for index_key in [k for k in metadata.storage_data if k.fqn == key]:
            del metadata.storage_data[index_key]
        metadata.state_dict_metadata[key] = BytesStorageMetadata()
        evil = os.path.join(folder, "__9_0.distcp")
        torch.save(_RunsCode(touch), evil)
        metadata.storage_data[MetadataIndex(key)] = _StorageInfo("__9_0.distcp", 0, os.path.getsize(evil))
        data = pickle.dumps(metadata)
    with open(index, "wb") as f:
        f.write(data)
    _resign(folder)
    return folder


TOOLS = {
    "sample": lambda folder, out: ["sample.py", folder, "--prompt", "The", "--max_tokens", "3"],
    "export_hf": lambda folder, out: ["export_hf.py", folder, out / "hf"],
    "evals": lambda folder, out: ["-m", "gptlab.evals.checkpoint", folder],
    "resume": lambda folder, out: ["train_gpt.py", "--resume", folder, "--experiments_dir", out / "exps"],
}


@pytest.mark.parametrize("variant", ["reduce", "stealth", "bytes"])
@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_no_tool_runs_code_from_a_sharded_checkpoint(genuine, tmp_path, variant, tool):
    marker = tmp_path / "code_ran"
    folder = craft(genuine, str(tmp_path / "step_000002"), variant, marker)
    checkpointing.load_checkpoint(os.path.join(folder, "checkpoint.pt"))  # the recomputed manifest passes
    proc = run_script(TOOLS[tool](folder, tmp_path))
    assert not marker.exists(), f"{tool} ran the checkpoint's code:\n{proc.stderr[-3000:]}"
    line = assert_one_clear_error(proc, folder, "--trust_model_code")
    assert [x for x in proc.stderr.splitlines() if x.strip()] == [line], proc.stderr[-3000:]
    assert not (tmp_path / "hf").exists() and not (tmp_path / "exps").exists()


def test_a_multi_rank_resume_runs_no_code_from_a_sharded_checkpoint(genuine, tmp_path):
    marker = tmp_path / "code_ran"
    folder = craft(genuine, str(tmp_path / "step_000002"), "stealth", marker)
    proc = run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()),
                       "train_gpt.py", "--resume", folder, "--experiments_dir", tmp_path / "exps"])
    assert proc.returncode != 0 and not marker.exists(), proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors and all(e == errors[0] and "--trust_model_code" in e for e in errors), proc.stderr[-3000:]
    assert "[rank0]" not in proc.stderr and "[rank1]" not in proc.stderr  # no rank's traceback
    assert not (tmp_path / "exps").exists()


def test_trust_model_code_reads_it_as_before(genuine, tmp_path):
    """The explicit opt-in reads the folder the way DCP does: the stealth pickle runs and the tool works."""
    marker = tmp_path / "code_ran"
    folder = craft(genuine, str(tmp_path / "step_000002"), "stealth", marker)
    proc = run_script(["sample.py", folder, "--prompt", "The", "--max_tokens", "3", "--trust_model_code"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker.read_text() == "ran"


@pytest.mark.parametrize("disk", ["fsize", "tmpfs"])
def test_a_full_disk_during_a_sharded_save_is_one_error_and_a_failed_run(tiny, tmp_path, disk):
    """fsize: files may not grow past 1 MB (RLIMIT_FSIZE for torchrun and its ranks, SIGXFSZ ignored: writes fail
    with EFBIG); tmpfs: the run folder on a 2 MiB tmpfs (a real ENOSPC). The logs and the code backup (~0.3 MB)
    fit, the step-2 checkpoint's two ~1.7 MB block files do not. Expected as for one file (docs/faults.md): one
    error line, results.json failed with it, nothing half-written left."""
    exps = tmp_path / "exps"
    exps.mkdir()
    limit = 1 << 20 if disk == "fsize" else resource.RLIM_INFINITY
    if disk == "tmpfs":
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(exps)]).returncode != 0:
            pytest.skip("cannot mount a tmpfs here (the fsize variant covers a full disk)")
    launcher = ("import resource, runpy, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
                "sys.argv = ['torchrun'] + sys.argv[1:]; "
                "runpy.run_module('torch.distributed.run', run_name='__main__', alter_sys=True)")
    try:
        proc = run_script(["-c", launcher, "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py"]
                          + tiny_args(tiny, exps, shard_params=True, **RUN_FLAGS))
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, proc.stderr[-5000:]
        assert errors[0].startswith("error: could not write checkpoint ") and "step_000002:" in errors[0], errors[0]
        assert ("File too large" if disk == "fsize" else "No space left on device") in errors[0], errors[0]
        assert "[rank0]" not in proc.stderr and "[rank1]" not in proc.stderr, proc.stderr[-5000:]  # no rank's traceback
        run_dir = only_run_dir(exps)
        with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
            results = json.load(f)
        assert results["status"] == "failed" and results["error"] == errors[0][len("error: "):], results
        assert os.listdir(os.path.join(run_dir, records.CHECKPOINT_DIR)) == []  # no step_000002.partial-* left
    finally:
        if disk == "tmpfs":
            subprocess.run(["umount", str(exps)], check=True)
