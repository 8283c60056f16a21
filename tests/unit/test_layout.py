"""The folder tree is the architecture: gptlab/ by pipeline stage, and no import runs back up the pipeline.

Stages, in pipeline order: core (errors, CLI, files, ranks) → text (documents in: the Hub or local files) →
tokenizer → data (shards, loaders, HellaSwag file) → checkpoint (checkpoint files, model sources: written by train,
read by every tool) → train (runs) → evals → compare → export → judge (two models' samples judged by an LLM) → paper
(a LaTeX project from runs). A module may import its own stage and earlier ones, never a later one; the package
never imports the top-level scripts or model.py by name.

The wheel holding every module: tests/e2e/test_layout_e2e.py."""
import ast

import pytest

from helpers.package_modules import package_modules

STAGES = ["gptlab.core", "gptlab.text", "gptlab.tokenizer", "gptlab.data", "gptlab.checkpoint", "gptlab.train",
          "gptlab.evals", "gptlab.compare", "gptlab.export", "gptlab.judge", "gptlab.paper"]
SCRIPTS = {"train_gpt", "model", "train_tokenizer", "download_fineweb", "download_hellaswag", "compare_experiments",
           "sweep", "compare_tokenizers", "sample", "export_hf", "judge", "evaluate", "make_paper"}


def stage(module):
    """Index in STAGES of the longest stage prefix of a dotted module name."""
    matches = [i for i, s in enumerate(STAGES) if module == s or module.startswith(s + ".")]
    assert matches, f"{module} belongs to no stage: put it in one of {STAGES}"
    return max(matches, key=lambda i: len(STAGES[i]))


def imports_of(path, module):
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: the exported folder's sibling (modeling_gptlab.py), not a package module
                continue
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "gptlab" else [node.module]
            yield from names


def test_no_import_runs_back_up_the_pipeline():
    problems = []
    for module, path in package_modules():
        if module == "gptlab":
            continue
        for imported in imports_of(path, module):
            if imported.split(".")[0] in SCRIPTS:
                problems.append(f"{module} imports the script {imported}")
            elif imported.startswith("gptlab.") and stage(imported) > stage(module):
                problems.append(f"{module} ({STAGES[stage(module)]}) imports {imported} ({STAGES[stage(imported)]})")
    assert not problems, "\n".join(problems)


def test_the_stage_check_catches_an_import_back_up(tmp_path):
    """The check itself: a train module importing compare, and a core module importing a script, are caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from gptlab.compare.stats import welch_t_test\n    import train_gpt\n")
    found = list(imports_of(str(bad), "gptlab.train.bad"))
    assert found == ["gptlab.compare.stats", "train_gpt"]
    assert stage("gptlab.compare.stats") > stage("gptlab.train.run")
    assert stage("gptlab.text.sources") == stage("gptlab.text")
    assert stage("gptlab.text") < stage("gptlab.tokenizer.job") < stage("gptlab.data.shards")
    with pytest.raises(AssertionError, match="no stage"):
        stage("gptlab.misc")
