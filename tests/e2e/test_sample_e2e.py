"""sample.py's command line, as a subprocess: it streams each prompt, reports tokens/s, and gives the same text with
and without the KV cache; the CPU threads it applies; --interactive at a terminal (a pseudo-terminal): line
editing, history, each prompt shown once, Ctrl-C and Ctrl-D; bench/bench_sample.py runs. The sampler itself:
tests/unit/test_sample.py; --threads' values: tests/unit/test_sample_threads.py."""
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

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
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    return subprocess.run([sys.executable] + args, cwd=REPO, env=env, input=stdin_text, capture_output=True,
                          text=True, timeout=300)



def stats_line(stderr):
    lines = [line for line in stderr.splitlines() if "tokens/s" in line]
    assert len(lines) == 1, stderr
    return lines[0]


def test_threads_default_to_one_follow_omp_num_threads_under_auto_and_the_flag_wins(checkpoint):
    """The thread count sample.py applies (its stats line reports torch.get_num_threads()): 1 by default, where
    torch's own default is one per core; OMP_NUM_THREADS when set; --threads over both."""
    ckpt_path, _ = checkpoint
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    cases = [({}, [], "1 CPU thread]"), ({"OMP_NUM_THREADS": "2"}, [], "2 CPU threads]"),
             ({"OMP_NUM_THREADS": "2"}, ["--threads", "3"], "3 CPU threads]")]

    def run(case):
        env_extra, flags, _ = case
        return subprocess.run([sys.executable, "sample.py", ckpt_path, "--max_tokens", "2"] + flags, cwd=REPO,
                              env=dict(env, PYTHONPATH=REPO, **env_extra), capture_output=True, text=True,
                              timeout=300)

    with ThreadPoolExecutor(2) as pool:  # side by side: each run reports the threads it set, not how fast they were
        procs = list(pool.map(run, cases))
    for (env_extra, flags, expected), proc in zip(cases, procs):
        assert proc.returncode == 0, proc.stderr
        assert stats_line(proc.stderr).endswith(expected), (env_extra, flags)


# ------------------------------------------------------------------------------- --interactive at a terminal
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # terminal control sequences readline may draw with


class Terminal:
    """`python ARGS` on a pseudo-terminal that is its controlling terminal (stdin, stdout and stderr), as a shell
    runs it: keys go in with turn() and finish(); Ctrl-C (\\x03) reaches it as SIGINT, Ctrl-D (\\x04) as EOF."""

    def __init__(self, args, timeout=120):
        import fcntl
        import termios

        self.master, slave = os.openpty()
        self.timeout, self.out = timeout, b""

        def controlling_terminal():  # in the child, after setsid: the pty becomes its terminal
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        env = dict(os.environ, TERM="xterm", PYTHONPATH=REPO, PYTHONUNBUFFERED="1")
        env.pop("OMP_NUM_THREADS", None)  # sample.py's default, 1 thread
        self.proc = subprocess.Popen([sys.executable] + args, cwd=REPO, env=env, stdin=slave, stdout=slave,
                                     stderr=slave, start_new_session=True, preexec_fn=controlling_terminal)
        os.close(slave)

    def read_until(self, pattern, start):
        """Read until the output from byte `start` on matches the regex `pattern` (None: until the program closes
        the terminal); the text from start."""
        import select

        deadline = time.time() + self.timeout
        while pattern is None or not re.search(pattern, self.text(start), re.S):
            ready, _, _ = select.select([self.master], [], [], max(0.0, deadline - time.time()))
            if not ready:
                raise AssertionError(f"timed out waiting for {pattern!r} in the terminal's output:\n{self.out!r}")
            chunk = self._read()
            if not chunk:
                if pattern is None:
                    break
                raise AssertionError(f"the program ended without {pattern!r} in its output:\n{self.out!r}")
            self.out += chunk
        return self.text(start)

    def turn(self, keys, end=r"CPU threads?\]\r\n> $"):
        """Type keys; the terminal's text from then until `end` (the stats line and the next "> ")."""
        start = len(self.out)
        os.write(self.master, keys)
        return self.read_until(end, start)

    def finish(self, keys):
        """Type keys; (exit status, the text from then until the program ended)."""
        start = len(self.out)
        os.write(self.master, keys)
        rest = self.read_until(None, start)
        return self.proc.wait(timeout=self.timeout), rest

    def wait_until_reading(self):
        """Wait until the program is blocked waiting for a key (select/poll), not merely past drawing "> ": a
        SIGINT that lands between readline drawing the prompt and its select() is only noticed at the next key."""
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            try:
                with open(f"/proc/{self.proc.pid}/wchan") as f:
                    wchan = f.read()
            except OSError:  # no /proc (not Linux): a pause instead
                time.sleep(0.5)
                return
            if "poll" in wchan or "select" in wchan:
                return
            if not wchan.strip("0\n"):  # the kernel hides wait channels here
                time.sleep(0.5)
                return
            time.sleep(0.01)
        raise AssertionError(f"the program never waited for a key:\n{self.out!r}")

    def _read(self):
        try:
            return os.read(self.master, 4096)
        except OSError:  # EIO: the program ended and closed its side
            return b""

    def text(self, start=0):
        return CSI.sub("", self.out[start:].decode(errors="replace"))

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def terminal():
    pytest.importorskip("termios")
    pytest.importorskip("readline")
    opened = []
    yield lambda args: opened.append(Terminal(args)) or opened[-1]
    for t in opened:
        t.close()


def test_interactive_terminal_edits_lines_recalls_history_prints_each_prompt_once_and_ends_lines(checkpoint,
                                                                                                 terminal):
    ckpt_path, _ = checkpoint
    flags = ["--temperature", "0", "--max_tokens", "12"]
    reference = run_script(["sample.py", ckpt_path, "--prompt", "hello"] + flags, check=True)
    continuation = reference.stdout.removeprefix("hello").removesuffix("\n")
    assert reference.stdout == "hello" + continuation + "\n" and continuation  # --prompt: prompt + continuation
    expected = re.escape(continuation.replace("\n", "\r\n")) + r"\r\n\[12 tokens in [^\]]*; 1 CPU thread\]\r\n> "
    term = terminal(["sample.py", ckpt_path, "--interactive"] + flags)
    term.read_until(r"> $", 0)
    # typed once, shown once: the terminal's echo of the line, then the continuation on the next line
    assert re.fullmatch(r"hello\r\n" + expected, term.turn(b"hello\r"))
    # "helo", Left, "l": the model gets "hello" (without line editing it would get "helo\x1b[Dl")
    edited = term.turn(b"helo\x1b[Dl\r")
    assert re.fullmatch(expected, edited.split("\r\n", 1)[1])
    # Up recalls the line before (history); the line is drawn once, then the same continuation
    assert re.fullmatch(r"hello\r\n" + expected, term.turn(b"\x1b[A\r"))
    # Ctrl-D at "> ": the line is ended, so the shell's prompt starts on a line of its own
    status, rest = term.finish(b"\x04")
    assert (status, rest) == (0, "\r\n")


def test_ctrl_c_stops_the_generation_under_way_and_at_the_prompt_ends_sample_py(checkpoint, terminal, tmp_path):
    """Ctrl-C while a continuation streams stops it (its stats line says so) and "> " asks for the next prompt;
    Ctrl-C at "> " ends sample.py as every command ends on Ctrl-C (status 130, "interrupted"). The generation is
    made endless (the model would end it at an unknown point) by a wrapper around generate()."""
    ckpt_path, _ = checkpoint
    driver = tmp_path / "endless_sample.py"
    driver.write_text(f"""import runpy, sys, time
sys.path.insert(0, {REPO!r})
import gptlab.export.generate as g

def endless(next_logits, prompt_tokens, max_tokens, **kwargs):  # the prompt's last token, again and again
    next_logits(prompt_tokens)
    while True:
        time.sleep(0.01)
        yield prompt_tokens[-1]

g.generate = endless
sys.argv[0] = {os.path.join(REPO, "sample.py")!r}
runpy.run_path(sys.argv[0], run_name="__main__")
""")
    term = terminal([str(driver), ckpt_path, "--interactive", "--max_tokens", "100000"])
    term.read_until(r"> $", 0)
    start = len(term.out)
    os.write(term.master, b"a\r")
    term.read_until(r"aaaaa", start)  # streaming
    stopped = term.turn(b"\x03")
    assert re.search(r"\r\n\[\d+ tokens in [^\]]*; stopped \(Ctrl-C\); KV cache; 1 CPU thread\]\r\n> $", stopped)
    term.wait_until_reading()  # Ctrl-C at "> ", as a person presses it: while sample.py waits for the line
    status, rest = term.finish(b"\x03")
    assert status == 130 and rest.strip().endswith("interrupted"), rest


def test_bench_sample_times_each_thread_count_and_prints_their_ratio():
    proc = run_script(["bench/bench_sample.py", "--tokens", "5", "--repeats", "1", "--threads", "1", "2"],
                      check=True)
    speeds = {int(n): float(v) for n, v in re.findall(r"^(\d+) threads?: +([0-9.]+) tokens/s$", proc.stdout, re.M)}
    assert sorted(speeds) == [1, 2], proc.stdout
    ratio = float(re.search(r"^ratio 1 / 2 threads: ([0-9.]+)$", proc.stdout, re.M).group(1))
    one, two = speeds[1], speeds[2]  # printed to 0.1, the ratio to 0.01: it lies within what that rounding allows
    assert (one - 0.05) / (two + 0.05) - 0.005 <= ratio <= (one + 0.05) / (two - 0.05) + 0.005, proc.stdout
