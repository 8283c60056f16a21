"""sample.py --interactive's prompts: one per line, read with line editing and history when a person types them at
a terminal, as plain lines from a pipe or a file.

    prompts = PromptReader()
    for prompt in prompts:
        if prompts.echo:
            print(prompt, end="")  # stdout is a record (a pipe, a file): the prompt, then its continuation
        ...

At a terminal (stdin and stdout both terminals) each prompt is read with input("> "), which Python's readline
hooks into: the arrow keys move in the line, Up and Down walk through this session's earlier prompts (kept in
memory only, never written to a file). The typed line stays on the screen, so it is not printed again; its
continuation starts on the next line. With stdin a terminal and stdout not, "> " goes to stderr and stdout gets
prompt + continuation. From a pipe (stdin not a terminal) there is no "> ". Ctrl-D (EOF) at "> " ends the prompts
after a newline, so what comes next starts on a line of its own.
"""
import sys

from gptlab.core.progress import is_terminal

PROMPT = "> "


class PromptReader:
    """An iterable of prompts from stdin, until EOF. echo: whether the caller should print each prompt before its
    continuation (False when the person's own line is already on the screen)."""

    def __init__(self):
        self.terminal = is_terminal(sys.stdin)
        on_screen = self.terminal and is_terminal(sys.stdout)
        # readline only when it has a terminal to draw on: imported for a pipe it could write escapes into it
        self.editing = on_screen and _enable_readline()
        self.echo = not on_screen

    def __iter__(self):
        while True:
            try:
                line = self._read()
            except EOFError:
                if self.terminal:  # Ctrl-D leaves the cursor after "> ": end that line
                    print(file=sys.stdout if self.editing else sys.stderr, flush=True)
                return
            yield line

    def _read(self):
        if self.editing:
            return input(PROMPT)  # readline: editing, and the line joins the history
        if self.terminal:
            print(PROMPT, end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line.removesuffix("\n").removesuffix("\r")  # a CRLF file's line end too: a \r would be echoed


def _enable_readline():
    """Import readline (importing it is what makes input() edit lines); False where Python has none (Windows)."""
    try:
        import readline
    except ImportError:
        return False
    if "libedit" not in (readline.__doc__ or ""):  # GNU readline syntax; libedit (macOS) keeps its own default
        readline.parse_and_bind("tab: self-insert")  # no completion to offer: a tab is text
    return True
