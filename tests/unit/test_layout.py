"""The folder tree is the architecture: gptlab/ by pipeline stage, and no import runs back up the pipeline.

Stages, in pipeline order: core (errors, CLI, files, ranks) → text (documents in: the Hub or local files) →
tokenizer → dataset (shards, loaders, HellaSwag file) → checkpoint (checkpoint files, model sources: written by
train, read by every tool) → train (runs) → evals → compare → export → judge (two models' samples judged by an
LLM) → paper (a LaTeX project from runs). A module may import its own stage and earlier ones, never a later one;
the package never imports the top-level scripts or model.py by name, and no two modules import each other, directly
or round a loop (not even inside a function): every dependency runs one way.

The wheel holding every module: tests/e2e/test_layout_e2e.py."""
import ast

import pytest

from helpers.package_modules import package_modules

STAGES = ["gptlab.core", "gptlab.text", "gptlab.tokenizer", "gptlab.dataset", "gptlab.checkpoint", "gptlab.train",
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
    assert stage("gptlab.text") < stage("gptlab.tokenizer.job") < stage("gptlab.dataset.shards")
    with pytest.raises(AssertionError, match="no stage"):
        stage("gptlab.misc")


def module_imports(path, known):
    """The package modules a file imports anywhere in it: `from gptlab.a import b` is gptlab.a.b where that is a
    module (else gptlab.a)."""
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module in known:
            subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
            yield from subs if len(subs) == len(node.names) else [node.module, *subs]


def import_cycles(graph):
    """Every strongly connected group of more than one module (Tarjan), each as a sorted list: a module that needs
    another which, through any chain of imports, needs it back."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_two_modules_import_each_other():
    modules = dict(package_modules())
    graph = {m: {i for i in module_imports(path, modules) if i != m} for m, path in modules.items()}
    assert import_cycles(graph) == [], "modules that import each other (make one depend on the other only)"


def test_the_cycle_check_catches_a_loop_even_through_a_function_level_import(tmp_path):
    """The check itself: two modules importing each other (one inside a function, as checkpointing.py once did with
    sharded_checkpoint.py), and a loop of three, are caught; a one-way chain is not."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from gptlab.checkpoint import format\n\ndef load():\n    from gptlab.checkpoint import b\n")
    b.write_text("import gptlab.core.errors\nfrom gptlab.checkpoint.a import load\n")
    known = {"gptlab.checkpoint", "gptlab.checkpoint.a", "gptlab.checkpoint.b", "gptlab.checkpoint.format"}
    assert sorted(module_imports(str(a), known)) == ["gptlab.checkpoint.b", "gptlab.checkpoint.format"]
    graph = {f"gptlab.checkpoint.{m.stem}": set(module_imports(str(m), known)) for m in (a, b)}
    assert import_cycles(graph) == [["gptlab.checkpoint.a", "gptlab.checkpoint.b"]]
    assert import_cycles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}}) == [["x", "y", "z"]]
    assert import_cycles({"x": {"y"}, "y": {"z"}, "w": {"x", "z"}}) == []
