"""A stand-in for an OpenAI-compatible chat-completions server on 127.0.0.1, for judge.py's tests: it answers
POST /v1/chat/completions by a known preference rule, and can be told to fail first (HTTP 429 or 500, a reply that
is not JSON, a reply too slow for the client's timeout) or to stop answering after N replies (it closes its port).

    with JudgeStandin(rule=prefer_longer) as judge:
        run judge.py ... --judge_url judge.url
        judge.questions  # [(text, A, B)] of every request received, in order

A rule maps (text, continuation A, continuation B) to the reply's content (or a dict: the whole message)."""
import http.server
import json
import re
import threading
import time

_PART = re.compile(r"\[The Start of (the Text|Continuation A|Continuation B)\]\n(.*?)\n\[The End of \1\]", re.S)
USAGE = {"prompt_tokens": 100, "completion_tokens": 10}  # per reply: the cost a test works out


def parts(messages):
    """(text, A, B) from the judge prompt's user message."""
    found = dict(_PART.findall(messages[-1]["content"]))
    return found["the Text"], found["Continuation A"], found["Continuation B"]


def prefer_longer(text, a, b):
    return "A is longer. [[A]]" if len(a) > len(b) else "B is longer. [[B]]" if len(b) > len(a) else "Same. [[C]]"


def prefer_first(text, a, b):
    return "The first one. [[A]]"


class JudgeStandin:
    def __init__(self, rule=prefer_longer, failures=(), stop_after=None, port=0, key=None):
        """failures: what the first requests get, in order: 429, 500 (statuses), "malformed", None (the answer),
        ("sleep", seconds) (then the answer). stop_after: close the port after that many answers. key: the Bearer
        key required (401 otherwise)."""
        self.rule, self.failures, self.stop_after, self.key = rule, list(failures), stop_after, key
        self.questions, self.answers, self.authorizations = [], 0, []
        self.lock = threading.Lock()
        standin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with standin.lock:
                    if standin.stop_after is not None and standin.answers >= standin.stop_after:
                        self.close_connection = True  # closing: a question that comes before the port is shut
                        return  # gets no answer, as at a closed port (the client sees the connection dropped)
                    standin.questions.append(parts(body["messages"]))
                    standin.authorizations.append(self.headers.get("Authorization"))
                    failure = standin.failures.pop(0) if standin.failures else None
                if self.path != "/v1/chat/completions":
                    return self.reply(404, b'{"error": "no such path"}')
                if standin.key is not None and self.headers.get("Authorization") != f"Bearer {standin.key}":
                    return self.reply(401, b'{"error": {"message": "Incorrect API key provided"}}')
                if isinstance(failure, int):
                    return self.reply(failure, b'{"error": {"message": "try later"}}')
                if failure == "malformed":
                    return self.reply(200, b'{"choices": [{"message": {"content": "[[A]]"')
                if isinstance(failure, tuple) and failure[0] == "sleep":
                    time.sleep(failure[1])
                answer = standin.rule(*parts(body["messages"]))
                message = answer if isinstance(answer, dict) else {"role": "assistant", "content": answer}
                with standin.lock:  # counted before the client has the answer, so its next question sees the count
                    standin.answers += 1
                    if standin.stop_after is not None and standin.answers >= standin.stop_after:
                        threading.Thread(target=standin.close).start()
                self.reply(200, json.dumps({"id": "x", "object": "chat.completion", "model": body["model"],
                                            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                                            "usage": {**USAGE, "total_tokens": sum(USAGE.values())}}).encode())

            def reply(self, status, data):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (its timeout)
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.closed = False

    def __enter__(self):
        self.thread.start()
        return self

    def close(self):
        if not self.closed:
            self.closed = True
            self.server.shutdown()
            self.server.server_close()

    def __exit__(self, *exc):
        self.close()
