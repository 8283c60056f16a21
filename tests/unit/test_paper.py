"""make_paper.py (issue 44): the LaTeX project from run folders. Its tables hold the figures the runs' results.json
record (means, stds, Welch p worked out here from the recorded values), its appendix is read from each run's own
model source (and changes with it), bad input is one error line, and the project compiles with pdflatex + bibtex
(once for the module). Without pdflatex the compile test FAILS, unless GPTLAB_NO_PDFLATEX=1 says the machine cannot
have it (.ci/run installs it where apt-get can)."""
import json
import math
import os
import re
import shutil
import statistics
import subprocess

import pytest

from gptlab.core.errors import run_cli
from helpers.run_folders import finished_results, make_run, metrics_rows, t_p, variant

import make_paper

BASE_BPB, SHIFT = [1.300, 1.310, 1.305], -0.015
# the experiment's name: every LaTeX special character, two dollars (matplotlib's mathtext), Latin-1 and beyond
IDEA = "My_Idea&100% $~^#{}\\é€中$"
IDEA_TEX = r"My\_Idea\&100\% \$$\sim$\^{}\#\{\}$\backslash$é[U+20AC][U+4E2D]\$"
MODEL_V1 = '''"""A tiny GPT for the paper tests."""
from dataclasses import dataclass, field


@dataclass
class GPTConfig:
    """The architecture."""
    num_layers: int = field(default=12, metadata={"help": "transformer blocks"})
    model_dim: int = 384


class MLP:
    """The feed-forward block."""

    def forward(self, x):
        # ReLU² activation (from Primer / So et al. 2021)
        return x


class GPT:
    """The model."""
'''
# the experiment's model.py: one more field and one more credited trick
MODEL_V2 = MODEL_V1.replace('    model_dim: int = 384\n', '    model_dim: int = 384\n    gate_mlp: bool = field('
                            'default=True, metadata={"help": "gated MLP units"})\n').replace(
    '    """The model."""\n', '    """The model."""\n    # gated linear units (Shazeer 2020, arXiv 2002.05202)\n'
                          '    gated = True\n')
TASKS = ("hellaswag", "piqa")


def _evals(shift, seed):
    """results.json's "evals" as train_gpt.py --evals records it (gptlab/train/run.py _evals_results)."""
    per_task = {t: {"acc": 0.30 + 0.01 * i + shift + 0.002 * seed, "gold_bpb": 1.5 + 0.1 * i - shift, "n": 100,
                    "baseline": 0.25} for i, t in enumerate(TASKS)}
    return {"core": 0.05 + shift + 0.001 * seed, "gold_bpb": 1.55 - shift, "tasks": list(TASKS), "limit": 100,
            "per_task": per_task}


def _lab(root, idea_model=MODEL_V2):
    """Base_line (3 seeds, MODEL_V1) and IDEA (3 seeds, idea_model, 0.015 bpb lower), each with the eval suite
    and a price; a judging of the idea's seed 0 against the baseline's seed 0."""
    folders = {}
    for day, (name, shift, model) in enumerate([("Base_line", 0.0, MODEL_V1), (IDEA, SHIFT, idea_model)], 1):
        for seed, bpb in enumerate(BASE_BPB):
            config = variant(model_name=name, seed=seed, num_layers=12, model_dim=384 + 128 * (day - 1),
                             git_commit=f"{day}{seed}abcdef0", command=f"python train_gpt.py --seed {seed}",
                             usd_per_gpu_hour=2.0)
            folder = f"2026010{day}_0{seed}0000_{'Idea' if day == 2 else 'Base'}"
            results = finished_results(config, bpb + shift, 0.30 - shift + 0.01 * seed, evals=_evals(shift, seed),
                                       usd_per_gpu_hour=2.0)
            folders[(name, seed)] = make_run(root, folder, config, metrics_rows(40, bpb + shift, 0.3), results,
                                             {"model.py": model, "train_gpt.py": "# Muon (Keller Jordan, 2024)\n"})
    judge = os.path.join(folders[(IDEA, 0)], "judge", "base__m")
    os.makedirs(judge)
    with open(os.path.join(judge, "summary.json"), "w") as f:
        json.dump({"baseline": folders[("Base_line", 0)], "experiment": folders[(IDEA, 0)],
                   "judge_model": "gpt-4o-mini", "n": 50, "prompts": 50, "wins": 20, "losses": 10, "ties": 20,
                   "win_rate": 0.6, "ci95": [0.5, 0.7], "sign_test_p": 0.0987, "cost_usd": 0.0123,
                   "refusals": 0, "unparseable": 0, "pending": 0}, f)
    return folders


def _read_json(folder, name):
    with open(os.path.join(folder, name)) as f:
        return json.load(f)


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("lab"))
    folders = _lab(os.path.join(root, "experiments"))
    out = os.path.join(root, "paper")
    made = make_paper.main([os.path.join(root, "experiments", "2026*"), "--out", out, "--title", "A_title & more"])
    return {"root": root, "folders": folders, "out": out, "made": made}


def _row(tex, first_cell):
    """The cells of the table row that starts with `first_cell` (LaTeX-escaped)."""
    for line in tex.splitlines():
        if line.startswith(first_cell + " & "):
            return [c.strip() for c in line.rstrip("\\ ").split(" & ")]
    raise AssertionError(f"no row {first_cell!r} in:\n{tex}")


def test_the_results_table_holds_the_recorded_figures_and_welch_p(paper):
    tex = _read(os.path.join(paper["out"], "tables", "results.tex"))
    bpb = {name: [_read_json(paper["folders"][(name, s)], "results.json")["final_val_bpb"] for s in range(3)]
           for name in ("Base_line", IDEA)}
    base, idea = bpb["Base_line"], bpb[IDEA]
    row = _row(tex, IDEA_TEX)
    assert row[1] == "3"
    assert row[2] == f"{statistics.mean(idea):.4f} $\\pm$ {statistics.stdev(idea):.4f}"
    assert row[4] == f"{statistics.mean(idea) - statistics.mean(base):+.4f}" == "-0.0150"
    # Welch's t with equal stds and n: df = 2 (n - 1) = 4, p in closed form; one test, so Holm's p is the same
    se = math.sqrt(statistics.variance(idea) / 3 + statistics.variance(base) / 3)
    p = t_p((statistics.mean(idea) - statistics.mean(base)) / se, 4)
    assert row[5] == row[6] == f"{p:.2g}", (row, p)
    assert row[7] == "better" if p < 0.05 else "not distinguishable"
    hellaswag = [_read_json(paper["folders"][(IDEA, s)], "results.json")["hellaswag"]["acc_norm"]
                 for s in range(3)]
    assert row[9] == f"{statistics.mean(hellaswag):.4f} $\\pm$ {statistics.stdev(hellaswag):.4f}"
    assert row[10] == r"60.0\% [50.0\%, 70.0\%] (n=50)"  # judge.py's summary.json
    assert _row(tex, r"Base\_line")[7] == "baseline"


def test_the_cost_evals_and_judge_tables_hold_the_recorded_figures(paper):
    tables = os.path.join(paper["out"], "tables")
    idea = [_read_json(paper["folders"][(IDEA, s)], "results.json") for s in range(3)]
    cost = _row(_read(os.path.join(tables, "cost.tex")), IDEA_TEX)
    hours = sum(r["wall_time_s"] for r in idea) / 3600  # 1 process each; no gpu_hours recorded
    assert cost[1] == "7.34M" and cost[2] == "81.92K"  # n_params 7,340,032; tokens 40 x 2048
    assert cost[6] == f"{hours:.3g}" and cost[7] == rf"\${2.0 * hours:.3g}"
    evals = _read(os.path.join(tables, "evals.tex"))
    piqa = _row(evals, "piqa")
    accs = [r["evals"]["per_task"]["piqa"]["acc"] for r in idea]
    assert piqa[3] == f"{statistics.mean(accs):.4f} $\\pm$ {statistics.stdev(accs):.4f}"
    core = [r["evals"]["core"] for r in idea]
    assert _row(evals, "core / mean gold bpb")[3] == f"{statistics.mean(core):.4f} $\\pm$ {statistics.stdev(core):.4f}"
    judge = _row(_read(os.path.join(tables, "judge.tex")), "20260102\\_000000\\_Idea")
    assert judge[1:5] == [r"20260101\_000000\_Base", "gpt-4o-mini", "50", "20 / 10 / 20"]


def test_every_string_from_the_runs_is_escaped(paper):
    out = paper["out"]
    text = "".join(_read(os.path.join(d, n)) for d, _, names in os.walk(out) for n in names if n.endswith(".tex"))
    assert "My_Idea" not in text and "Idea&100%" not in text  # raw, the name would break the document
    assert IDEA_TEX in text
    assert r"A\_title \& more" in _read(os.path.join(out, "main.tex"))


def test_the_appendix_is_the_recorded_source_of_each_setting(paper):
    appendix = _read(os.path.join(paper["out"], "appendix.tex")).replace(r"\allowbreak{}", "")
    # two model sources: the baseline's and the idea's, each with its classes, fields and credited tricks
    assert appendix.count(r"\subsection{Model source") == 2
    assert r"GPTConfig.gate\_mlp" in appendix and "gated MLP units" in appendix
    assert appendix.count(r"\citep{so2021primer}") == 2 and appendix.count(r"\citep{arxiv2002_05202}") == 1
    assert re.search(r"\\citep\{[^}]*jordan2024muon", appendix)  # train_gpt.py's credit
    bib = _read(os.path.join(paper["out"], "refs.bib"))
    for key in ("so2021primer", "arxiv2002_05202", "zellers2019hellaswag", "bisk2020piqa", "jordan2024moddednanogpt",
                "penedo2024fineweb", "jordan2024muon", "zheng2023judging"):
        assert re.search(r"@\w+\{" + key + ",", bib), key


def test_the_appendix_changes_when_the_model_source_changes(tmp_path):
    """The same runs, the baseline's model.py edited in its code/ backup: the appendix follows the file."""
    folders = _lab(str(tmp_path / "experiments"), idea_model=MODEL_V1)
    args = [str(tmp_path / "experiments" / "*_Base")]
    make_paper.main(args + ["--out", str(tmp_path / "a")])
    for seed in range(3):
        with open(os.path.join(folders[("Base_line", seed)], "code", "model.py"), "w") as f:
            f.write(MODEL_V2)
    make_paper.main(args + ["--out", str(tmp_path / "b")])
    before, after = (_read(str(tmp_path / x / "appendix.tex")).replace(r"\allowbreak{}", "") for x in "ab")
    assert "gate" not in before and "arxiv2002" not in before
    assert r"GPTConfig.gate\_mlp" in after and r"\citep{arxiv2002_05202}" in after
    assert "arxiv2002_05202" in _read(str(tmp_path / "b" / "refs.bib"))


def test_a_run_without_a_code_backup_shows_its_checkpoints_model_source(tmp_path):
    """No code/ folder: the appendix is the model source the run's checkpoint carries (not today's model.py)."""
    from gptlab.checkpoint.model_source import current_source, sha256_text
    from helpers.random_checkpoint import save_random_checkpoint
    from helpers.tiny_data import save_tiny_tokenizer

    config = variant(model_name="Ckpt", seed=0)
    run = make_run(str(tmp_path), "20260101_000000_Ckpt", config, metrics_rows(40, 1.3, 0.3),
                   finished_results(config, 1.3, 0.3))
    code = current_source()["code"] + "\n# a trick only this checkpoint has (Doe et al. 2031, arXiv 3101.00001)\n"
    tokenizer = str(tmp_path / "tok.pkl")
    save_tiny_tokenizer(tokenizer, ["a tiny text for a tiny tokenizer. " * 20], n_merges=8)
    os.makedirs(os.path.join(run, "checkpoints"))
    save_random_checkpoint(os.path.join(run, "checkpoints", "step_000040.pt"), tokenizer, num_layers=2,
                           model_dim=64, model_source={"file": "model.py", "code": code, "sha256": sha256_text(code)})
    make_paper.main([run, "--out", str(tmp_path / "p")])
    appendix = _read(str(tmp_path / "p" / "appendix.tex")).replace(r"\allowbreak{}", "")
    assert "checkpoint (model\\_source)" in appendix and sha256_text(code)[:12] in appendix
    assert r"\citep{arxiv3101_00001}" in appendix
    assert "No train\\_gpt.py was recorded for Ckpt" in appendix


def test_reproduce_sh_has_each_runs_command_and_commit(paper):
    script = _read(os.path.join(paper["out"], "reproduce.sh"))
    for (name, seed), folder in paper["folders"].items():
        config = _read_json(folder, "config.json")
        assert f"#   git commit {config['git_commit']};" in script
        rebuilt = f"reproduce/{os.path.basename(folder)}"
        assert f"[ -d {rebuilt} ] || python -m gptlab.train.code_backup {folder} {rebuilt}\n" in script
        assert (f"python reproduce/{os.path.basename(folder)}/train_gpt.py --seed {seed}") in script
    assert subprocess.run(["bash", "-n", os.path.join(paper["out"], "reproduce.sh")]).returncode == 0


def test_baseline_names_a_setting_or_a_run(paper, tmp_path):
    """--baseline by model name (its seed group) or by run folder: the other setting is then tested against it."""
    runs = os.path.join(paper["root"], "experiments", "2026*")
    for i, baseline in enumerate([IDEA, paper["folders"][(IDEA, 1)]]):
        out = str(tmp_path / f"p{i}")
        make_paper.main([runs, "--out", out, "--baseline", baseline])
        tex = _read(os.path.join(out, "tables", "results.tex"))
        assert _row(tex, IDEA_TEX)[7] == "baseline"
        assert _row(tex, r"Base\_line")[4] == f"{-SHIFT:+.4f}"


def _error_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(make_paper.main, argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    return err


def test_bad_input_is_one_error_line_and_destroys_nothing(paper, tmp_path, capsys):
    runs = os.path.join(paper["root"], "experiments", "*_Base")
    before = sorted(os.listdir(paper["out"]))
    assert "already exists" in _error_line([runs, "--out", paper["out"]], capsys)
    assert sorted(os.listdir(paper["out"])) == before
    assert "no run folder matches" in _error_line([str(tmp_path / "nothing*"), "--out", str(tmp_path / "p")], capsys)
    (tmp_path / "notes").mkdir()
    assert "is not a run folder" in _error_line([str(tmp_path / "notes"), "--out", str(tmp_path / "p")], capsys)
    assert not (tmp_path / "p").exists()
    # --overwrite replaces it, with only the baseline's runs now
    make_paper.main([runs, "--out", str(tmp_path / "q")])
    make_paper.main([runs, "--out", str(tmp_path / "q"), "--overwrite"])
    assert not os.path.exists(tmp_path / "q" / "tables" / "judge.tex")


def test_the_project_compiles_with_pdflatex_and_bibtex(paper, tmp_path):
    if not shutil.which("pdflatex") or not shutil.which("bibtex"):
        if os.environ.get("GPTLAB_NO_PDFLATEX") == "1":
            pytest.skip("GPTLAB_NO_PDFLATEX=1: this machine cannot have pdflatex")
        pytest.fail("pdflatex / bibtex not found: install them (Debian: apt-get install --no-install-recommends "
                    "texlive-latex-base texlive-latex-recommended; .ci/run does), or set GPTLAB_NO_PDFLATEX=1 on a "
                    "machine that cannot have them")
    folder = str(tmp_path / "paper")
    shutil.copytree(paper["out"], folder)
    log = []
    for command in (["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "main"], ["bibtex", "main"],
                    ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "main"],
                    ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "main"]):
        proc = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=120)
        log.append(proc.stdout[-3000:])
        assert proc.returncode == 0, "\n".join(log)
    text = _read(os.path.join(folder, "main.log"))
    assert os.path.getsize(os.path.join(folder, "main.pdf")) > 10_000
    # every citation and reference resolved, no character without a glyph
    problems = re.findall(r".*(?:(?:Citation|Reference) `[^']*' .*undefined|undefined references|Missing character).*",
                          text)
    assert not problems, problems


def test_a_recorded_command_with_spaces_comes_back_as_the_same_words(monkeypatch):
    """config.json's command is shlex-quoted when recorded, and reproduce.sh quotes each word again: a path with a
    space and a quote stays one argument from the run to the script (the shell's own split, shlex.split, checks)."""
    import shlex
    import sys
    from types import SimpleNamespace

    from gptlab.paper.reproduce import run_block
    from gptlab.train import environment

    argv = ["train_gpt.py", "--train_files", "my data/it's.bin", "--seed", "1"]
    monkeypatch.setattr(sys, "argv", argv)
    command = environment.command_line()
    assert shlex.split(command)[1:] == argv
    run = SimpleNamespace(config={"command": command, "git_commit": "a" * 40}, name="20260101_000000_X",
                          seed=1, val_bpb=1.5, world_size=1, path="/nonexistent/run")
    line = run_block(run, "X")[-2]
    assert shlex.split(line)[1:] == ["reproduce/20260101_000000_X/train_gpt.py", "--train_files", "my data/it's.bin",
                                     "--seed", "1"]
