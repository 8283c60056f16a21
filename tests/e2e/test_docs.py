"""The README and docs/ stay true: the README is short, every docs page exists, every relative link (and #anchor)
resolves, and every command they show works as written: the script or module exists and takes every flag given
(read from its --help), a `bash X.sh MODE` names a mode the script has, and the shown refusals and leaderboards are
what the commands print today. Nothing here trains."""
import os
import re
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import pytest

from conftest import REPO, run_script

README = os.path.join(REPO, "README.md")
DOC_PAGES = ["tokenizer.md", "data.md", "training.md", "comparing.md", "using-a-model.md", "faults.md",
             "benchmarks.md", "judge.md", "paper.md"]
MAX_README_LINES = 300


def doc_files():
    """README.md, EXPERIMENTING.md and every docs/*.md, as paths relative to the repository."""
    docs = sorted(os.path.join("docs", name) for name in os.listdir(os.path.join(REPO, "docs"))
                  if name.endswith(".md"))
    return ["README.md", "EXPERIMENTING.md"] + docs


def read(rel):
    with open(os.path.join(REPO, rel), encoding="utf-8") as f:
        return f.read()


# ------------------------------------------------------------------------------------------------ markdown parsing

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)


def fenced_blocks(text):
    """[(language, body)] of every fenced code block."""
    return [(m.group(1).lower(), m.group(2)) for m in FENCE.finditer(text)]


def prose(text):
    """The text outside fenced code blocks."""
    return FENCE.sub("", text)


def slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link's text only
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(rel):
    found, seen = set(), {}
    for line in prose(read(rel)).splitlines():
        m = re.match(r"#{1,6} +(.+?) *#*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(rel):
    """Every markdown link or image target in rel's prose."""
    return re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose(read(rel)))


def logical_lines(body):
    """The lines of a shell block with backslash continuations joined."""
    out, current = [], ""
    for line in body.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
        else:
            out.append(current + line)
            current = ""
    if current:
        out.append(current)
    return out


def commands(rel):
    """[(command text, shown output lines or None)] in rel: every line of a ```bash / ```sh block, every `$ ` line
    of another block (with the output lines shown under it, up to the next `$ `), and every inline `code` span of
    the prose that starts with python, torchrun, bash or one of the repository's scripts."""
    text = read(rel)
    found = []
    for lang, body in fenced_blocks(text):
        lines = logical_lines(body)
        if lang in ("bash", "sh", "shell"):
            found += [(line[2:] if line.startswith("$ ") else line, None) for line in lines if line.strip()]
        elif lang in ("", "console", "text"):
            for i, line in enumerate(lines):
                if line.startswith("$ "):
                    shown = []
                    for later in lines[i + 1:]:
                        if later.startswith("$ "):
                            break
                        shown.append(later)
                    found.append((line[2:], shown))
    spans = [span for paragraph in re.split(r"\n\s*\n", prose(text)) for span in re.findall(r"`([^`]+)`", paragraph)]
    for span in spans:
        span = " ".join(span.split())
        try:
            words = shlex.split(span)
        except ValueError:
            continue
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words = words[1:]
        if words and (words[0] in ("python", "python3", "torchrun", "bash") or is_repo_script(words[0])):
            found.append((span, None))
    return found


def is_repo_script(word):
    return word.endswith(".py") and "/" not in word.strip("./") and os.path.isfile(os.path.join(REPO, word))


def simple_commands(line):
    """The simple commands of a shell line (split on && || | ; &), each a list of words; comments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    words = list(lexer)
    out, current = [], []
    for word in words:
        if word in ("&&", "||", "|", ";", "&"):
            out.append(current)
            current = []
        else:
            current.append(word)
    out.append(current)
    return [c for c in out if c]


# ------------------------------------------------------------------------------------------------ what each takes

@lru_cache(maxsize=None)
def source_of(target):
    """The file behind a script path or a `-m` module name, or None when there is none in the repository."""
    if target.endswith(".py"):
        path = os.path.join(REPO, target)
        return path if os.path.isfile(path) else None
    base = os.path.join(REPO, *target.split("."))
    for path in (base + ".py", os.path.join(base, "__main__.py")):
        if os.path.isfile(path):
            return path
    return None


def help_args(target):
    if target == "torchrun":
        return ["-m", "torch.distributed.run", "--help"]
    return ([target] if target.endswith(".py") else ["-m", target]) + ["--help"]


def parse_help(text):
    """{flag: choices or None} from an argparse --help: the option strings at the start of each option entry."""
    flags = {}
    for line in text.splitlines():
        if not re.match(r"^  -", line):
            continue
        head = re.split(r"\s{2,}", line[2:])[0]
        for m in re.finditer(r"(--[A-Za-z][\w-]*)(?:[ =]\{([^}]*)\})?", head):
            flags[m.group(1)] = set(m.group(2).split(",")) if m.group(2) else None
    return flags


_flags = {}


def load_flags(targets):
    """Fill _flags for each target (a script path, a module name or 'torchrun'), running the --help of those that
    have an argument parser, a few at a time; a file without one takes no flags."""
    todo = []
    for target in set(targets) - set(_flags):
        if target != "torchrun":
            with open(source_of(target), encoding="utf-8") as f:
                if "ArgumentParser" not in f.read():
                    _flags[target] = {}
                    continue
        todo.append(target)

    def run_help(target):
        proc = run_script(help_args(target), timeout=120)
        assert proc.returncode == 0, f"{target} --help failed:\n{proc.stderr[-2000:]}"
        return target, parse_help(proc.stdout)

    with ThreadPoolExecutor(max_workers=3) as pool:
        for target, flags in pool.map(run_help, todo):
            assert flags, f"no flags found in {target} --help"
            _flags[target] = flags


def invocation(words):
    """(target, launcher words, script words) of one simple command, or None when it runs nothing of ours.
    target: a repository script path, a gptlab module name or a bash script path."""
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]  # VAR=value prefixes
    if not words:
        return None
    if words[0] in ("python", "python3"):
        if len(words) > 2 and words[1] == "-m":
            return (words[2], [], words[3:]) if words[2].startswith("gptlab") else None
        if len(words) > 1 and words[1].endswith(".py"):
            return words[1], [], words[2:]
        return None
    if words[0] == "torchrun":
        for i, word in enumerate(words):
            if word.endswith(".py"):
                return word, words[1:i], words[i + 1:]
        return None
    if words[0] == "bash" and len(words) > 1 and words[1].endswith(".sh"):
        return words[1], [], words[2:]
    if is_repo_script(words[0]):
        return words[0], [], words[1:]
    return None


def is_placeholder(value):
    return "..." in value or value.isupper() or any(c in value for c in "{}<>|")


def flag_problems(target, words, where):
    """What is wrong with the flags `words` give `target` (a script or module that has --help)."""
    problems = []
    accepted = _flags[target]
    words = [w.strip("[]") for w in words]
    for i, word in enumerate(words):
        if word == "--":
            if target == "sweep.py":  # the rest are train_gpt.py's flags
                load_flags(["train_gpt.py"])
                problems += flag_problems("train_gpt.py", words[i + 1:], where)
            break
        if not word.startswith("--"):
            continue
        name, _, value = word.partition("=")
        if name not in accepted:
            problems.append(f"{where}: {target} has no flag {name}")
            continue
        if value == "" and i + 1 < len(words) and not words[i + 1].startswith("-"):
            value = words[i + 1]
        choices = accepted[name]
        if choices and value and not is_placeholder(value) and value not in choices:
            problems.append(f"{where}: {target} {name} takes one of {sorted(choices)}, not {value!r}")
        if target == "sweep.py" and name == "--grid" and re.match(r"^[a-z_]+=", value):
            load_flags(["train_gpt.py"])
            if "--" + value.split("=")[0] not in _flags["train_gpt.py"]:
                problems.append(f"{where}: --grid {value}: train_gpt.py has no flag --{value.split('=')[0]}")
    return problems


def all_commands():
    """[(where, simple command words, shown output or None)] over every doc file."""
    out = []
    for rel in doc_files():
        for text, shown in commands(rel):
            try:
                parts = simple_commands(text)
            except ValueError as err:
                raise AssertionError(f"{rel}: `{text}` is not a valid shell line ({err})") from None
            out += [(f"{rel}: `{text}`", words, shown) for words in parts]
    return out


# ------------------------------------------------------------------------------------------------ the tests

def test_the_readme_is_short():
    with open(README, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


def test_every_docs_page_exists_and_the_readme_links_to_it():
    readme = read("README.md")
    for page in DOC_PAGES:
        assert os.path.isfile(os.path.join(REPO, "docs", page)), f"docs/{page} is missing"
        assert f"(docs/{page}" in readme, f"README.md does not link to docs/{page}"


def test_every_relative_link_and_anchor_resolves():
    problems = []
    for rel in doc_files():
        for target in links(rel):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(rel), path)) if path else rel
            if not os.path.exists(os.path.join(REPO, resolved)):
                problems.append(f"{rel}: link to {target}: {resolved} does not exist")
            elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                problems.append(f"{rel}: link to {target}: {resolved} has no heading #{anchor}")
    assert not problems, "\n".join(problems)


def test_every_command_names_a_script_and_flags_that_exist():
    found = [(where, invocation(words), words) for where, words, _ in all_commands()]
    found = [(where, inv, words) for where, inv, words in found if inv]
    assert len(found) > 50, f"only {len(found)} commands found: is the parser broken?"
    problems = []
    for where, (target, launcher, args), _ in found:
        if source_of(target) is None and not (target.endswith(".sh") and os.path.isfile(os.path.join(REPO, target))):
            problems.append(f"{where}: {target} does not exist")
    assert not problems, "\n".join(problems)
    load_flags([t for _, (t, _, _), _ in found if not t.endswith(".sh")]
               + (["torchrun"] if any(w[0] == "torchrun" for _, _, w in found) else []))
    for where, (target, launcher, args), words in found:
        if target.endswith(".sh"):  # our shell scripts take no flags, at most a mode
            problems += [f"{where}: {target} takes no flag {w}" for w in args if w.startswith("-")]
            modes = re.findall(r"^\s*([\w|-]+)\)", read(target), re.M)
            if args and modes and not is_placeholder(args[0]) and \
                    not any(args[0] in mode.split("|") for mode in modes):
                problems.append(f"{where}: {target} has no mode {args[0]} (it has {', '.join(modes)})")
            continue
        if launcher:
            problems += flag_problems("torchrun", launcher, where)
        problems += flag_problems(target, args, where)
    shown_refusals = [(where, words) for where, words, shown in all_commands()
                      if shown and any(line.startswith("error:") for line in shown)]
    problems = [p for p in problems if not any(p.startswith(where + ":") for where, _ in shown_refusals)]
    assert not problems, "\n".join(problems)


def test_the_refusals_shown_are_what_the_scripts_print():
    """A `$ command` whose shown output is an `error:` line demonstrates a refusal: it prints exactly that line and
    exits with status 2."""
    cases = []
    for where, words, shown in all_commands():
        errors = [line for line in (shown or []) if line.startswith("error:")]
        if errors and invocation(words):
            cases.append((where, words, errors[0]))
    assert cases, "no refusal shown in the docs"

    def run(case):
        where, words, expected = case
        target, _, args = invocation(words)
        proc = run_script(([target] if target.endswith(".py") else ["-m", target]) + args, timeout=120)
        return where, expected, proc

    with ThreadPoolExecutor(max_workers=3) as pool:
        for where, expected, proc in pool.map(run, cases):
            got = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and got and got[-1] == expected, \
                f"{where}: shown {expected!r}, printed (exit {proc.returncode}):\n{proc.stderr[-1500:]}"


def committed_runs_copy(tmp_path):
    """A folder holding a copy of the committed experiments/ only (no run made on this machine)."""
    proc = subprocess.run(["git", "ls-files", "experiments"], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("not a git checkout: cannot tell the committed runs apart")
    for rel in proc.stdout.split():
        dest = tmp_path / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.join(REPO, rel), dest)
    return tmp_path


def test_the_leaderboards_shown_are_what_compare_experiments_prints(tmp_path):
    """Every `$ compare_experiments.py ... --no-write --no-plot` shown on the committed baselines prints the shown
    lines today, in order (a "(cut...)" line stands for lines left out)."""
    cases = []
    for where, words, shown in all_commands():
        inv = invocation(words)
        if shown and inv and inv[0] == "compare_experiments.py" and "--no-write" in inv[2] and "--no-plot" in inv[2] \
                and not any(w.startswith("--experiments") or w.startswith("sweeps/") for w in inv[2]):
            env = dict(w.split("=", 1) for w in words[:words.index("python")] if "=" in w)
            cases.append((where, inv[2], env, shown))
    assert cases, "no leaderboard shown in the docs"
    cwd = committed_runs_copy(tmp_path)
    for where, args, env, shown in cases:
        proc = run_script([os.path.join(REPO, "compare_experiments.py")] + args, cwd=str(cwd), env_extra=env,
                          timeout=120)
        assert proc.returncode == 0, f"{where}:\n{proc.stderr[-2000:]}"
        printed = [line.rstrip() for line in proc.stdout.splitlines()]
        at = 0
        for line in shown:
            if not line.strip() or line.startswith("(cut"):
                continue
            while at < len(printed) and printed[at] != line.rstrip():
                at += 1
            assert at < len(printed), f"{where}: shown line not printed (in this order):\n{line}\n\nprinted:\n" \
                                      + proc.stdout[-4000:]
            at += 1
