"""sample.py's command line, as a subprocess: it streams each prompt, reports tokens/s, and gives the same text with
and without the KV cache. The sampler itself: tests/unit/test_sample.py."""
import os
import sys

import pytest

from conftest import REPO, SHARED_DATA, run_script
from helpers.sample_checkpoint import checkpoint  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout"),
              pytest.mark.usefixtures("one_torch_thread")]


def test_sample_cli_streams_each_prompt_and_reports_tokens_per_second(checkpoint):
    ckpt_path, _ = checkpoint
    prompts = "Once upon a time,\nThe water cycle<|endoftext|>In this lesson\n"
    outs = []
    for extra in ([], ["--no_cache"]):
        proc = subprocess_run(["sample.py", ckpt_path, "--interactive", "--max_tokens", "30", "--seed", "3",
                               "--top_k", "100"] + extra, prompts)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout)
        stats = [line for line in proc.stderr.splitlines() if "tokens/s" in line]
        assert len(stats) == 2, proc.stderr
    assert outs[0] == outs[1]  # the KV cache changes the speed, not the text
    lines = outs[0].splitlines()
    assert outs[0].startswith("Once upon a time,") and "The water cycle<|endoftext|>In this lesson" in outs[0]
    assert len(lines) >= 2
    bad = run_script(["sample.py", ckpt_path, "--top_p", "1.5"])
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --top_p must be in (0, 1], got 1.5"


def subprocess_run(args, stdin_text):
    import subprocess

    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    return subprocess.run([sys.executable] + args, cwd=REPO, env=env, input=stdin_text, capture_output=True,
                          text=True, timeout=300)

