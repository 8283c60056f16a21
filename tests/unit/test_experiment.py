"""gptlab/train/records.py: run folders, metrics CSV, code backup, results/config, checkpoints."""
import datetime
import json
import math
import os

import pytest
import torch

from conftest import REPO
from gptlab.checkpoint import checkpointing
from gptlab.checkpoint.format import CHECKPOINT_FORMAT

from gptlab.train import environment

from gptlab.train import records
from gptlab.core.errors import UserError


def test_run_dirs_never_collide(tmp_path):
    now = datetime.datetime(2025, 1, 2, 3, 4, 5)
    a = records.create_run_dir(str(tmp_path), "M", now)
    b = records.create_run_dir(str(tmp_path), "M", now)
    assert os.path.basename(a) == "20250102_030405_M" and os.path.basename(b) == "20250102_030405_M_2"
    for bad in ("a/b", "", ".hidden"):
        with pytest.raises(UserError, match="--model_name"):
            records.create_run_dir(str(tmp_path), bad)


def test_metrics_csv_columns_empty_cells_and_no_overwrite(tmp_path):
    path = str(tmp_path / records.METRICS_FILE)
    writer = records.MetricsWriter(path)
    writer.write(step=1, tokens=1024, train_loss=4.123456789, lr=1.0)
    writer.write(step=1, tokens=1024, val_loss=4.5, val_bpb=1.25)
    with open(path) as f:  # flushed as it goes: readable before close
        lines = f.read().splitlines()
    assert lines[0].split(",") == records.METRICS_COLUMNS
    assert lines[1] == "1,1024,4.1234568,,,1,,,,,,,"
    rows = records.read_metrics(path)
    assert rows[1]["val_bpb"] == 1.25 and rows[1]["train_loss"] is None
    with pytest.raises(ValueError):
        writer.write(step=2, bogus=1)
    writer.close()
    with pytest.raises(FileExistsError):
        records.MetricsWriter(path)
    # the tolerant reader (for browsing runs) reads the writer's own file (\r\n line ends) exactly like strict
    tolerant = records.read_metrics(path, strict=False)
    assert tolerant.rows == list(rows) and not tolerant.notes and not tolerant.truncated
    assert isinstance(rows[0]["step"], int) and rows[0]["tokens"] == 1024
    # runs recorded before the tflops_per_gpu / mfu columns existed read the same, those cells as missing
    old = tmp_path / "old_metrics.csv"
    old.write_text(",".join(records.METRICS_COLUMNS[:11]) + "\n1,1024,4.5,,,1,0.5,0.5,2048,,\n")
    (row,) = records.read_metrics(str(old))
    assert row["tokens_per_s"] == 2048 and "mfu" not in row


def test_metrics_csv_takes_the_evals_suites_columns_after_the_usual_ones(tmp_path):
    """train_gpt.py --evals: its columns (fixed at start) follow METRICS_COLUMNS and both readers keep them."""
    path = str(tmp_path / records.METRICS_FILE)
    writer = records.MetricsWriter(path, ["evals_core", "evals_copa_acc"])
    writer.write(step=4, tokens=4096, evals_core=0.125, evals_copa_acc=0.5625)
    writer.write(step=5, tokens=5120, train_loss=3.5)
    with pytest.raises(ValueError):
        writer.write(step=6, evals_piqa_acc=0.5)  # not a column of this run
    writer.close()
    with open(path) as f:
        lines = f.read().splitlines()
    assert lines[0] == ",".join(records.METRICS_COLUMNS) + ",evals_core,evals_copa_acc"
    assert lines[1] == "4,4096" + "," * 11 + ",0.125,0.5625"
    for strict in (True, False):
        rows = records.read_metrics(path, strict=strict)
        assert rows[0]["evals_core"] == 0.125 and rows[0]["evals_copa_acc"] == 0.5625
        assert rows[1]["evals_core"] is None and rows[1]["train_loss"] == 3.5
    with pytest.raises(ValueError):  # only the suite's own prefix: no clash with the usual columns
        records.MetricsWriter(str(tmp_path / "other.csv"), ["val_bpb"])


def test_metrics_reader_strict_raises_tolerant_notes(tmp_path):
    path = str(tmp_path / records.METRICS_FILE)
    writer = records.MetricsWriter(path)
    for step in range(1, 4):
        writer.write(step=step, tokens=step * 8, train_loss=float("nan") if step == 2 else 1.0 / step)
    writer.close()
    assert math.isnan(records.read_metrics(path)[1]["train_loss"])  # strict keeps a diverged loss as NaN
    assert records.read_metrics(path, strict=False)[1]["train_loss"] is None  # browsing: not plottable, not measured
    with open(path, "a") as f:
        empty_cells = "," * (len(records.METRICS_COLUMNS) - 3)
        f.write(f"oops,{empty_cells},\r\n4,32,0.25{empty_cells}\r\n5,40,0.2")  # garbage, a good row, a cut-off one
    with pytest.raises(ValueError, match=r"metrics.csv: last line is half-written"):
        records.read_metrics(path)
    metrics = records.read_metrics(path, strict=False)
    assert [r["step"] for r in metrics] == [1, 2, 3, 4] and metrics.truncated
    assert metrics.last("train_loss") == 0.25 and metrics.series("step", "train_loss")[0] == [1, 3, 4]
    assert any("half-written" in n for n in metrics.notes) and any("ignored 1 unreadable line(s): 5" in n
                                                                  for n in metrics.notes)
    with open(path, "a") as f:
        f.write("\r\n")  # now complete: strict names the garbage line
    with pytest.raises(ValueError, match=r"line 5 is unreadable"):
        records.read_metrics(path)


def test_run_json_reader_notes_damage(tmp_path):
    notes = []
    assert records.read_run_json(str(tmp_path), records.CONFIG_FILE, notes) is None and notes == []  # missing: no note
    (tmp_path / records.RESULTS_FILE).write_text('{"status": "fini')
    (tmp_path / records.CONFIG_FILE).write_text("[1, 2]")
    assert records.read_run_json(str(tmp_path), records.RESULTS_FILE, notes) is None
    assert records.read_run_json(str(tmp_path), records.CONFIG_FILE, notes) is None
    assert notes[0].startswith("results.json is unreadable") and notes[1] == "config.json is not a JSON object; ignored it"
    assert records.is_run_folder(str(tmp_path)) and not records.is_run_folder(str(tmp_path / "missing"))


def test_results_and_config_are_written_once(tmp_path):
    records.write_config(str(tmp_path), {"a": 1})
    records.write_results(str(tmp_path), {"status": "finished", "final_val_loss": 3.0})
    with open(tmp_path / records.RESULTS_FILE) as f:
        assert json.load(f)["status"] == "finished"
    with pytest.raises(UserError, match="already exists"):
        records.write_results(str(tmp_path), {"status": "failed", "error": "x"})
    with pytest.raises(ValueError):
        records.write_results(str(tmp_path / "other"), {"status": "running"})


def test_code_backup_keeps_every_project_source_and_the_tokenizer_script(tmp_path):
    """This checkout backed up (research files whole, the rest as commit + patch, or whole outside git) and
    rebuilt: every project source comes back as it is in the worktree now."""
    from gptlab.train import code_backup

    repo = REPO
    code_backup.backup_code(repo, str(tmp_path), "print('tokenizer trainer')\n")
    rebuilt = code_backup.rebuild_sources(str(tmp_path))
    for rel in ("train_gpt.py", "model.py", "gptlab/train/records.py", "gptlab/dataset/loader.py",
                "gptlab/tokenizer/merge_loop.c", "requirements.txt"):
        with open(os.path.join(repo, rel), "rb") as f:
            assert rebuilt[rel] == f.read(), rel
    assert not any("__pycache__" in rel or rel.startswith("tests") for rel in rebuilt)
    assert (tmp_path / records.CODE_DIR / "tokenizer_train_script.py").read_text() == "print('tokenizer trainer')\n"


def test_checkpoint_round_trip_strips_compile_prefixes(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    state = {"_orig_mod." + k: v for k, v in model.state_dict().items()}
    path = str(tmp_path / "ckpt" / "step_000003.pt")
    checkpointing.save_checkpoint(path, model_state=state, model_config={"d": 3}, step=3, args={"seed": 0},
                        tokenizer={"name": "t", "ranks_sha256": "ab"}, optimizer_states=[opt.state_dict()],
                        dataloader_state={"pos": 7}, rng_states={"torch": torch.get_rng_state()})
    ckpt = checkpointing.load_checkpoint(path)
    assert set(ckpt["model"]) == {"weight", "bias"} and torch.equal(ckpt["model"]["weight"], model.weight)
    assert ckpt["step"] == 3 and ckpt["dataloader"] == {"pos": 7} and ckpt["tokenizer"]["name"] == "t"
    opt2 = torch.optim.Adam(model.parameters())
    opt2.load_state_dict(ckpt["optimizers"][0])
    with pytest.raises(UserError, match="already exists"):  # never overwritten
        checkpointing.save_checkpoint(path, model_state={}, model_config={}, step=4)
    with pytest.raises(UserError, match="does not exist"):
        checkpointing.load_checkpoint(str(tmp_path / "missing.pt"))
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="cannot be read"):
        checkpointing.load_checkpoint(str(junk))
    torch.save({"weight": torch.zeros(2)}, str(tmp_path / "plain.pt"))
    with pytest.raises(UserError, match="not a gptlab checkpoint"):
        checkpointing.load_checkpoint(str(tmp_path / "plain.pt"))


def test_environment_records():
    mem = environment.peak_memory("cpu")
    assert mem["allocated_gb"] > 0 and "max RSS" in mem["label"]
    hw = environment.hardware_info("cpu")
    assert hw["cpu_model"] and hw["gpu_count"] == 0 and hw["gpu_name"] is None
    v = environment.versions()
    assert v["torch"] == torch.__version__ and v["python"]


@pytest.mark.parametrize("device_name, tflops", [
    # names as torch.cuda.get_device_name() prints them; dense bf16 figures (no sparsity) from NVIDIA datasheets
    ("NVIDIA H100 80GB HBM3", 989.4),  # H100 SXM5
    ("NVIDIA H100 PCIe", 756.0),
    ("NVIDIA H100 NVL", 835.0),  # per GPU
    ("NVIDIA H200", 989.0),
    ("NVIDIA H200 NVL", 835.5),  # 1,671 with sparsity
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA A100-SXM4-40GB", 312.0),
    ("NVIDIA A100 80GB PCIe", 312.0),
    ("NVIDIA L40S", 362.05),
    ("NVIDIA L40", 181.05),  # not the L4's 121 nor the L40S's 362
    ("NVIDIA L4", 121.0),
    ("NVIDIA GeForce RTX 4090", 165.2),  # Ada whitepaper, FP32 accumulate
])
def test_gpu_peak_table_on_real_device_names(device_name, tflops):
    assert environment.gpu_bf16_peak_tflops(device_name) == pytest.approx(tflops, rel=1e-3)


@pytest.mark.parametrize("device_name", [None, "", "cpu", "NVIDIA RTX A6000", "NVIDIA GeForce RTX 4080"])
def test_gpu_peak_is_unknown_rather_than_guessed(device_name):
    assert environment.gpu_bf16_peak_tflops(device_name) is None


class _RunsCodeWhenUnpickled:
    """Unpickling this calls os.mkdir(marker): what a malicious checkpoint would do with a worse function."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_load_checkpoint_refuses_a_file_that_carries_code_and_never_runs_it(tmp_path):
    marker = str(tmp_path / "code_ran")
    path = str(tmp_path / "step_000001.pt")
    payload = {"format": CHECKPOINT_FORMAT, "format_version": 1, "step": 1, "model": {}, "model_config": {},
               "args": {"payload": _RunsCodeWhenUnpickled(marker)}}
    torch.save(payload, path)
    with pytest.raises(UserError, match="cannot be read"):
        checkpointing.load_checkpoint(path)
    assert not os.path.exists(marker)
    torch.load(path, weights_only=False)  # the file really does run code when loaded without the guard
    assert os.path.isdir(marker)
