"""--tensorboard and --wandb: a real tiny run's scalars read back from TensorBoard's event file and from the W&B
offline run's records (the .wandb file, read by the record format written out below), against its metrics.csv;
missing packages named with their pip install; the flags do not split seed groups."""
import glob
import os
import sys

import pytest

from conftest import HELLASWAG_VAL, SHARED_DATA, run_script
from gptlab.train import records as run_records
from gptlab.core.errors import UserError

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")


def read_wandb_records(path):
    """The protobuf Records of a .wandb file. Its format (W&B's datastore, LevelDB's log format): a 7-byte header
    (":W&B", magic 0xBEE1, version), then 32 KiB blocks of records, each a 7-byte header (CRC-32C, uint16 length,
    type: 1 full, 2 first, 3 middle, 4 last) and its bytes; a block's last < 7 bytes are padding."""
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B" and data[4:6] == (0xBEE1).to_bytes(2, "little")
    records, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if kind == 0:  # zeros: the unwritten rest of the last block
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def test_a_run_logs_its_scalars_to_tensorboard_and_wandb(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    import json

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from helpers.tiny_data import make_dataset

    tiny = make_dataset(str(tmp_path / "data"), n_merges=256)
    from helpers.tiny_runs import tiny_args  # the tiny CPU run the trainer's own tests use

    from helpers.eval_tasks import data_dir_with

    evals_data = data_dir_with(tmp_path / "evals", ["copa", "boolq"], limit=4)  # --evals: its columns too
    argv = tiny_args(tiny, tmp_path / "runs", train_steps=6, val_loss_every=3, hellaswag_limit=8,
                     hellaswag_path=HELLASWAG_VAL, tensorboard=True, wandb="gptlab-tests", evals="copa,boolq",
                     evals_every=3, evals_data_dir=evals_data)
    env = {"WANDB_MODE": "offline", "WANDB_CONFIG_DIR": str(tmp_path / "wandb_config"),
           "WANDB_CACHE_DIR": str(tmp_path / "wandb_cache"), "WANDB_DATA_DIR": str(tmp_path / "wandb_data")}
    run_script(["train_gpt.py"] + argv, env_extra=env, check=True)
    run_dir = glob.glob(str(tmp_path / "runs" / "*_tiny"))[0]
    metrics = run_records.read_metrics(os.path.join(run_dir, run_records.METRICS_FILE))
    expected = {}  # column → {step: value}, from metrics.csv
    for row in metrics:
        for column, value in row.items():
            if column != "step" and value is not None:
                expected.setdefault(column, {})[row["step"]] = value
    assert {"train_loss", "val_loss", "val_bpb", "lr", "tokens_per_s", "hellaswag_acc",
            "hellaswag_acc_norm", "evals_core", "evals_gold_bpb", "evals_copa_acc",
            "evals_boolq_gold_bpb"} <= set(expected)
    assert expected["evals_core"].keys() == {3, 6}

    # TensorBoard: an event file in the run folder, every metrics.csv value under its column name and step
    assert len(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))) == 1
    events = EventAccumulator(run_dir)
    events.Reload()
    assert set(events.Tags()["scalars"]) == set(expected)
    for column, by_step in expected.items():
        got = {e.step: e.value for e in events.Scalars(column)}
        assert got.keys() == by_step.keys(), column
        assert all(abs(got[s] - v) <= 1e-6 * max(1, abs(v)) for s, v in by_step.items()), column

    # W&B offline: run-<id>.wandb under the run folder's wandb/, its history rows holding the same values
    wandb_files = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb"))
    assert len(wandb_files) == 1
    records = read_wandb_records(wandb_files[0])
    history = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            history.setdefault(row["_step"], {}).update(row)
    for column, by_step in expected.items():
        assert {s: history[s][column] for s in by_step} == pytest.approx(by_step, rel=1e-6), column
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    logged_config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert logged_config["train_steps"] == 6 and logged_config["model_dim"] == 64


def test_a_missing_package_is_named_with_its_install(monkeypatch):
    from gptlab.train.dashboards import check_available

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if not installed
    with pytest.raises(UserError, match=r"--tensorboard needs the tensorboard package: pip install tensorboard"):
        check_available(tensorboard=True)
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(UserError, match=r"--wandb needs the wandb package: pip install wandb"):
        check_available(wandb_project="p")
    check_available()  # a plain run needs neither


def test_dashboard_flags_do_not_split_a_seed_group():
    from gptlab.compare.stats import seed_group_key

    plain = {"model_dim": 128, "seed": 0}
    assert seed_group_key(plain) == seed_group_key({"model_dim": 128, "seed": 1, "tensorboard": True,
                                                    "wandb": "my-project"})
