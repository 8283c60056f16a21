"""An architecture experiment flows through every tool: edit model.py in a copy of the repository, train with
--save_model, sample and export; put model.py back and sample and export the experiment's checkpoint again. The
checkpoint carries its model's source, so the text is the same before and after (greedy, and sampled with a seed,
which moves with any change of the logits). Also: who may run a checkpoint's code, and checkpoints from before
model sources (format 2) are refused with the command that converts them, which then resume exactly."""
import dataclasses
import glob
import hashlib
import json
import os
import sys

import pytest
import torch

from conftest import HELLASWAG_VAL, REPO, SHARED_DATA, run_script
from helpers.model_edits import copy_repository, evaluate_and_export, sample_texts
from gptlab.checkpoint.format import payload_sha256
from gptlab.train import records

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")

# three kinds of edit a researcher makes, as (old text, new text) replacements in model.py
EDITS = {
    "new_weight_in_every_block": [  # SwiGLU: a gate matrix in every MLP
        ("        self.c_fc = CastedLinear(dim, hidden)\n",
         "        self.c_fc = CastedLinear(dim, hidden)\n        self.c_gate = CastedLinear(dim, hidden)\n"),
        ("        return self.c_proj(F.relu(self.c_fc(x)).square())\n",
         "        return self.c_proj(F.silu(self.c_gate(x)) * self.c_fc(x))\n")],
    "removed_weight": [  # no x0 mixing: each block's lambdas go
        ("        self.lambdas = nn.Parameter(torch.tensor([1.0, 0.0]))\n", ""),
        ("        a, b = self.lambdas.to(x.dtype)  # keep the residual stream in its (autocast) dtype\n"
         "        x = a * x + b * x0\n", "")],
    "changed_activation": [  # same weights, another computation
        ("        return self.c_proj(F.relu(self.c_fc(x)).square())\n",
         "        return self.c_proj(F.gelu(self.c_fc(x)))\n")],
}


def edit_model(repo, edit):
    path = os.path.join(repo, "model.py")
    with open(path) as f:
        text = f.read()
    for old, new in EDITS[edit]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    with open(path, "w") as f:
        f.write(text)
    return text


@pytest.fixture(scope="module")
def trained(tiny, tmp_path_factory):
    """The training runs the tests share (a train_gpt.py process each), made on first use: trained(edit) gives
    (the model.py it trained, its run folder, its checkpoints: the middle step's and the last step's). An edit:
    10 steps (fewer leave the sampled text the same under today's model.py for the changed activation),
    --checkpoint_every 5 --save_model, scored on 6 HellaSwag examples; edit None (today's model.py): 6 steps,
    --checkpoint_every 3. The tests work in repositories of their own, with the model.py each needs."""
    root = tmp_path_factory.mktemp("trained")
    repo = copy_repository(str(root / "repo"))
    with open(os.path.join(repo, "model.py")) as f:
        original = f.read()
    runs = {}

    def get(edit):
        if edit not in runs:
            with open(os.path.join(repo, "model.py"), "w") as f:
                f.write(original)
            text = original if edit is None else edit_model(repo, edit)
            steps, extra = 6, ["--checkpoint_every", "3"]
            if edit is not None:
                steps, extra = 10, ["--checkpoint_every", "5", "--save_model", "--hellaswag_limit", "6",
                                    "--hellaswag_path", HELLASWAG_VAL]
            ckpts = train(repo, tiny, root / f"exps_{edit}", steps=steps, extra=extra)
            assert [os.path.basename(c) for c in ckpts] == [f"step_{steps // 2:06d}.pt", f"step_{steps:06d}.pt"], ckpts
            runs[edit] = text, os.path.dirname(os.path.dirname(ckpts[-1])), ckpts
        return runs[edit]

    return get


def train(repo, tiny, exp_dir, steps=10, extra=()):
    flags = ["--tokenizer", tiny["tokenizer"], "--train_files", tiny["train"], "--val_files", tiny["val"],
             "--train_seq_len", "128", "--val_seq_len", "128", "--model_dim", "64", "--num_heads", "2",
             "--num_layers", "4", "--batch_size", "1024", "--device_batch_size", "512", "--train_steps", str(steps),
             "--val_loss_every", "0", "--val_steps", "2", "--window_size", "256", "--hellaswag_limit", "0",
             "--experiments_dir", str(exp_dir), "--log_every", "0", "--sample_tokens", "0", "--model_name", "edit",
             *extra]
    run_script(["train_gpt.py", *flags], cwd=repo, check=True)
    return sorted(glob.glob(os.path.join(str(exp_dir), "*", "checkpoints", "*.pt")))


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_architecture_edit_flows_through_every_tool_before_and_after_it_is_reverted(edit, trained, tmp_path):
    pytest.importorskip("transformers")
    repo = copy_repository(str(tmp_path / "repo"))
    with open(os.path.join(repo, "model.py")) as f:
        original = f.read()
    assert edit_model(repo, edit) == trained(edit)[0]  # the experiment's model.py is in the repository
    edited, run_dir, ckpts = trained(edit)
    ckpt = ckpts[-1]  # the final model
    saved = torch.load(ckpt, weights_only=True)
    assert saved["model_source"]["code"] == edited  # the run trained the edited model and says so
    assert saved["model_source"]["sha256"] == hashlib.sha256(edited.encode()).hexdigest()
    if edit == "new_weight_in_every_block":
        assert "blocks.0.mlp.c_gate.weight" in saved["model"]
    if edit == "removed_weight":
        assert not any(k.endswith(".lambdas") and "attn" not in k for k in saved["model"])
    with open(os.path.join(run_dir, "code", "model.py")) as f:
        assert f.read() == edited  # the run folder keeps the experiment's model whole

    before = sample_texts(repo, ckpt)
    assert isinstance(before, tuple), before.stderr
    figures, export = evaluate_and_export(repo, ckpt, tmp_path / "eval_before.json", tmp_path / "hf_before")
    before += (figures,)
    with open(os.path.join(run_dir, "results.json")) as f:
        results = json.load(f)  # the run's own final evaluation, in the training loop
    assert before[2]["val_bpb"] == pytest.approx(results["final_val_bpb"], rel=1e-9)
    assert before[2]["hellaswag"]["acc_norm"] == results["hellaswag"]["acc_norm"]
    assert export.returncode == 0, export.stderr
    assert "tokenizer identical" in export.stdout

    with open(os.path.join(repo, "model.py"), "w") as f:  # the researcher goes back to the baseline
        f.write(original)
    after = sample_texts(repo, ckpt)
    assert isinstance(after, tuple), after.stderr
    figures, export = evaluate_and_export(repo, ckpt, tmp_path / "eval_after.json", tmp_path / "hf_after")
    after += (figures,)
    assert after == before
    assert export.returncode == 0, export.stderr
    assert "tokenizer identical" in export.stdout
    with open(tmp_path / "hf_after" / "gptlab_model.py") as f:
        assert f.read() == edited  # the export ships the checkpoint's model, not today's


def test_a_checkpoint_from_another_machine_runs_its_code_only_when_trusted(trained, tmp_path):
    repo = copy_repository(str(tmp_path / "repo"))  # today's model.py
    ckpt = trained("changed_activation")[2][-1]
    trusted = sample_texts(repo, ckpt)
    elsewhere = {"GPTLAB_HOME": str(tmp_path / "another_machine")}  # no record of the run that trained it
    refused = sample_texts(repo, ckpt, env_extra=elsewhere)
    assert not isinstance(refused, tuple) and refused.returncode == 2
    assert refused.stderr.startswith("error: ") and refused.stderr.count("\n") == 1
    assert "--trust_model_code" in refused.stderr and ckpt in refused.stderr
    assert sample_texts(repo, ckpt, env_extra=elsewhere, extra=["--trust_model_code"]) == trusted
    # the same source as today's model.py needs no trust anywhere
    baseline = trained(None)[2][-1]
    assert isinstance(sample_texts(repo, baseline, env_extra=elsewhere), tuple)


def losses(run_dir):
    return {r["step"]: r["train_loss"] for r in records.read_metrics(os.path.join(run_dir, "metrics.csv"))
            if r["train_loss"] is not None}


def test_resume_continues_on_the_checkpoints_model_after_model_py_moved_on(trained, tmp_path):
    """10 steps of an edited model with a checkpoint at 5; with today's model.py, --resume from step 5 gives the
    losses of steps 6-10 (the resumed run trains the checkpoint's model, not today's, which could not even load
    its weights)."""
    repo = copy_repository(str(tmp_path / "repo"))  # today's model.py
    edited, full_dir, (ckpt, _) = trained("new_weight_in_every_block")
    run_script(["train_gpt.py", "--resume", ckpt, "--experiments_dir", str(tmp_path / "resumed")], cwd=repo,
               check=True)
    (resumed_dir,) = glob.glob(str(tmp_path / "resumed" / "*_edit*"))
    full, resumed = losses(full_dir), losses(resumed_dir)
    assert sorted(resumed) == [6, 7, 8, 9, 10]  # as exact as any resume (tests/e2e/test_train_gpt_e2e.py: 1e-6)
    assert all(abs(resumed[s] - full[s]) <= 1e-6 * abs(full[s]) for s in resumed), (resumed, full)
    with open(os.path.join(resumed_dir, "code", "model.py")) as f:
        assert f.read() == edited


def _as_format_2(path, out):
    """The checkpoint at path as the previous format wrote it: no model source, no window_size in its
    configuration, the former hand-written Adam's state (one step count per group), format_version 2."""

    old = torch.load(path, weights_only=True)
    del old["model_source"]
    old["model_config"].pop("window_size")
    adam = old["optimizers"][0]
    steps = {int(s.pop("step")) for s in adam["state"].values()}
    (step,) = steps
    adam["param_groups"] = [{k: g[k] for k in ("lr", "betas", "eps", "params", "name", "initial_lr")} | {"step": step}
                            for g in adam["param_groups"]]
    old["format_version"] = 2
    old["sha256"] = payload_sha256(old)
    torch.save(old, out)


def test_a_format_2_checkpoint_is_refused_with_the_command_that_converts_it_and_then_resumes_exactly(trained,
                                                                                                       tmp_path):
    repo = copy_repository(str(tmp_path / "repo"))
    _, full_dir, (ckpt, _) = trained(None)
    old = str(tmp_path / "old" / "step_000003.pt")
    os.makedirs(os.path.dirname(old))
    _as_format_2(ckpt, old)
    for command in (["sample.py", old], ["train_gpt.py", "--resume", old], ["export_hf.py", old, str(tmp_path / "x")]):
        proc = run_script(command, cwd=repo)
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, command
        assert f"python -m gptlab.checkpoint.convert_checkpoint {old}" in proc.stderr
    converted = run_script([sys.executable and "-m", "gptlab.checkpoint.convert_checkpoint", old], cwd=repo, check=True)
    new = str(tmp_path / "old" / "step_000003_v3.pt")
    assert new in converted.stdout
    assert run_script(["-m", "gptlab.checkpoint.convert_checkpoint", old], cwd=repo).returncode == 2  # never overwritten
    run_script(["train_gpt.py", "--resume", new, "--experiments_dir", str(tmp_path / "resumed")], cwd=repo,
               check=True)

    (resumed_dir,) = glob.glob(str(tmp_path / "resumed" / "*"))
    full, resumed = losses(full_dir), losses(resumed_dir)
    assert sorted(resumed) == [4, 5, 6]  # as exact as any resume (tests/e2e/test_train_gpt_e2e.py: 1e-6)
    assert all(abs(resumed[s] - full[s]) <= 1e-6 * abs(full[s]) for s in resumed), (resumed, full)
    a, b = torch.load(ckpt, weights_only=True), torch.load(new, weights_only=True)
    assert a["model_config"] == b["model_config"] and a["model_source"] == b["model_source"]


def test_a_format_2_checkpoint_whose_weights_do_not_fit_todays_model_is_not_converted(trained, tmp_path):
    repo = copy_repository(str(tmp_path / "repo"))  # today's model.py
    ckpt = trained("new_weight_in_every_block")[2][0]
    old = str(tmp_path / "step_000005.pt")
    _as_format_2(ckpt, old)
    proc = run_script(["-m", "gptlab.checkpoint.convert_checkpoint", old], cwd=repo)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "c_gate" in proc.stderr
    assert "--model_source" in proc.stderr and not os.path.exists(str(tmp_path / "step_000005_v3.pt"))


def test_the_model_config_fields_are_the_flags_and_the_recorded_configuration():
    """train_gpt.py's model flags are GPTConfig's fields (a field a researcher adds becomes a flag), and a
    checkpoint's model_config is the dataclass whole."""
    sys.path.insert(0, REPO)
    import model as arch
    import train_gpt

    parser_flags = {a.dest for a in train_gpt.build_parser()._actions}
    fields = [f.name for f in dataclasses.fields(arch.GPTConfig)]
    assert set(fields) - {"max_seq_len"} <= parser_flags
    assert fields == ["vocab_size", "num_layers", "num_heads", "model_dim", "head_dim", "mlp_ratio", "num_val_emb",
                      "window_size", "max_seq_len", "mup_base_width", "mup_base_heads"]  # (the last two: --mup's)


# the other architectures' tiny runs (tiny_args: dim 64, 2 heads, 4 layers, rows of 128), 10 steps each
ARCH_FLAGS = {"gpt2.py": dict(arch="gpt2", window_size=None, lr=3e-3, warmup_steps=2, train_steps=10, val_loss_every=5),
              "llama.py": dict(arch="llama", window_size=None, num_kv_heads=1, multiple_of=32, lr=3e-3, warmup_steps=2,
                               train_steps=10, val_loss_every=5)}


@pytest.mark.parametrize("file", sorted(ARCH_FLAGS))
def test_an_edit_of_gpt2_or_llama_flows_through_every_tool_before_and_after_it_is_reverted(file, tiny, tmp_path):
    """The experiment above on gpt2.py and llama.py: a new weight in every block trains, samples, evaluates and
    exports (custom code: no longer a GPT2LMHeadModel / LlamaForCausalLM); with the file put back, the checkpoint
    gives the same texts and figures, equal to the run's own final evaluation."""
    pytest.importorskip("transformers")
    from helpers.model_edits import gated
    from helpers.tiny_runs import only_run_dir, run_json, tiny_args

    repo = copy_repository(str(tmp_path / "repo"))
    path = os.path.join(repo, file)
    with open(path, encoding="utf-8") as f:
        original = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(gated(original, file))
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "exps", save_model=True, hellaswag_limit=6,
                                            hellaswag_path=HELLASWAG_VAL, **ARCH_FLAGS[file]), cwd=repo, check=True)
    run_dir = only_run_dir(tmp_path / "exps")
    ckpt = os.path.join(run_dir, records.CHECKPOINT_DIR, "step_000010.pt")
    saved = torch.load(ckpt, weights_only=True)
    assert saved["model_source"]["file"] == file and saved["model_source"]["code"] == gated(original, file)
    assert "blocks.0.gate" in saved["model"] and "blocks.3.gate" in saved["model"]
    with open(os.path.join(run_dir, records.CODE_DIR, file), encoding="utf-8") as f:
        assert f.read() == gated(original, file)
    results = run_json(run_dir, records.RESULTS_FILE)
    figures = []
    for when in ("before", "after"):
        if when == "after":
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)  # the researcher goes back to the published architecture
        texts = sample_texts(repo, ckpt)
        assert isinstance(texts, tuple), texts.stderr
        evaluated, export = evaluate_and_export(repo, ckpt, tmp_path / f"eval_{when}.json", tmp_path / f"hf_{when}")
        assert export.returncode == 0 and "tokenizer identical" in export.stdout, export.stderr[-3000:]
        assert "note: not exported as a standard transformers model" in export.stderr
        figures.append((texts, evaluated))
    assert figures[0] == figures[1]
    assert figures[0][1]["val_bpb"] == pytest.approx(results["final_val_bpb"], rel=1e-9)
    assert figures[0][1]["hellaswag"]["acc_norm"] == results["hellaswag"]["acc_norm"]
