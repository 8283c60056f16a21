"""Evaluation files cannot change under a run (issue 37, item 6): a HellaSwag file replaced, modified in place or
removed while a run trains stops the run at its next HellaSwag with one error line naming the file, and
results.json says failed with that line (docs/faults.md, 'Evaluation files cannot change under a run'), as a
changed shard does, instead of a silently different acc_norm under the same 'first N' label."""
import os
import sys

import pytest

from conftest import HELLASWAG_VAL, SHARED_DATA
from helpers.tiny_runs import run_acting, stopped_by_changed_file, tiny_args
from gptlab.train import records

pytestmark = [pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals")]


def hellaswag_lines(first, last):
    with open(HELLASWAG_VAL, "rb") as f:
        return b"".join(f.readlines()[first:last])


@pytest.mark.parametrize("change, what", [
    ("replace:{path}:{other}", "bytes"),  # another HellaSwag file renamed over it
    ("modify:{path}", "sha256"),  # its first answer changed in place: same size, valid JSON
    ("remove:{path}", "it is gone"),
])
def test_a_hellaswag_file_changed_mid_run_stops_it_with_one_error(tiny, tmp_path, change, what):
    path, other = tmp_path / "hellaswag.jsonl", tmp_path / "other.jsonl"
    path.write_bytes(hellaswag_lines(0, 20))
    other.write_bytes(hellaswag_lines(20, 40))
    argv = tiny_args(tiny, tmp_path / "exps", train_steps=4, val_loss_every=0, hellaswag_every=2, hellaswag_limit=10,
                     hellaswag_path=path)
    proc = run_acting(argv, "train_step:1", change.format(path=path, other=other))  # before the first HellaSwag
    run_dir = stopped_by_changed_file(proc, path, what, tmp_path / "exps")
    rows = records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
    assert [r for r in rows if r["hellaswag_acc"] is not None] == []  # no figure from the changed file
