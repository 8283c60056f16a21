"""train_gpt.py's command line refusing what tests/unit/test_train_cli_audit.py found, as a user meets it: one
`error:` line naming the flag and the fix, no traceback, and nothing in --experiments_dir."""
import os

from conftest import run_scripts
from helpers.tiny_runs import tiny_args


def test_refused_flags_give_one_error_line_and_leave_no_run_folder(tiny, tmp_path):
    exps = tmp_path / "exps"
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o555)  # run_script drops root's override, so this folder is really unwritable
    cases = {
        "device_batch_size": (tiny_args(tiny, exps, device_batch_size=64),
                              "error: --device_batch_size 64 is not a multiple of --train_seq_len 128 (a micro-batch "
                              "holds whole rows); use 128"),
        # a million blocks: refused from the counts of 64 and 128 (it took hours to build on the meta device)
        "num_layers": (tiny_args(tiny, exps, num_layers=1_000_000), "parameters: with gradients and optimizer state"),
        "device": (tiny_args(tiny, exps, device="cuda:x"),
                   "error: --device 'cuda:x' is not one of auto, cpu, cuda, cuda:N (N a GPU's index)"),
        "experiments_dir": (tiny_args(tiny, locked / "exps"), f"error: cannot write in {locked} (Permission denied)"),
    }
    procs = run_scripts([["train_gpt.py"] + argv for argv, _ in cases.values()], timeout=300)
    for (name, (_, expected)), proc in zip(cases.items(), procs):
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, (name, proc.stderr[-2000:])
        assert lines and lines[-1].startswith("error: ") and expected in lines[-1], (name, lines[-3:])
        assert "--" + name in lines[-1] or name == "experiments_dir", (name, lines[-1])
    assert not exps.exists() or not os.listdir(exps)
    assert os.listdir(locked) == []
