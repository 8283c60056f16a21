"""One request to a judge through the OpenAI-compatible chat-completions API (POST {url}/chat/completions), which
OpenAI, vLLM, llama.cpp's server, Ollama and other hosts speak; the standard library only.

Transient failures are retried with exponential backoff (backoff_s, 2 x backoff_s, ...; a Retry-After header is
honoured up to 60 s), at most `tries` tries: HTTP 408, 429 and 5xx, a timeout, a dropped connection, a reply that is
not the API's JSON. What then still fails is a JudgeError for that one item (the caller records it and goes on).
A judge that cannot be reached at all (connection refused, unknown host) after the tries, or that refuses the key
(401, 403) or does not know the path or model (404), is a UserError: every later request would fail alike.

The key is sent as `Authorization: Bearer KEY` and is never written anywhere: what is recorded is the reply, with
any echo of the key masked.
"""
import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

from gptlab.core.errors import UserError, escape_controls

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
RETRY_AFTER_MAX_S = 60.0


class JudgeError(Exception):
    """An item the judge could not answer after the retries: kind (http, timeout, malformed, connection) and why."""

    def __init__(self, kind, message, tries):
        super().__init__(message)
        self.kind, self.tries = kind, tries


def endpoint(url):
    return url.rstrip("/") + "/chat/completions"


def is_local(url):
    return (urllib.parse.urlsplit(url).hostname or "") in LOCAL_HOSTS


def check_url(url):
    """--judge_url: an http(s) URL with a host (the API's base, e.g. https://api.openai.com/v1)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--judge_url {escape_controls(url)!r} is not an http(s) URL; give the API's base, e.g. "
                        "https://api.openai.com/v1 or http://127.0.0.1:8000/v1")


def check_reachable(url, timeout_s=10.0):
    """Open (and close) a TCP connection to the judge's host, so a judge that is not there fails at once, before any
    model is loaded."""
    parts = urllib.parse.urlsplit(url)
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname):
        return  # the requests go through a proxy: the host itself may be out of reach from here
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
    except (OSError, ValueError) as err:
        raise UserError(f"cannot reach the judge at {url} ({_reason(err)}); start the server or correct "
                        "--judge_url") from None


def _reason(err):
    if isinstance(err, urllib.error.URLError) and not isinstance(err, urllib.error.HTTPError):
        err = err.reason if isinstance(err.reason, BaseException) else err
    return escape_controls(getattr(err, "strerror", None) or err or type(err).__name__)


def _masked(text, key):
    text = escape_controls(text)[:500]
    return text.replace(key, "***") if key else text


def _retry_after(err):
    try:
        return min(max(float(err.headers.get("Retry-After", "")), 0.0), RETRY_AFTER_MAX_S)
    except (TypeError, ValueError, AttributeError):
        return None


def parse_reply(raw):
    """The API's JSON → {"content", "refusal", "finish_reason", "usage"}; ValueError when it is not that shape."""
    data = json.loads(raw)
    try:
        choice = data["choices"][0]
        message = choice["message"]
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise TypeError("content is not text")
    except (KeyError, IndexError, TypeError, AttributeError) as err:
        raise ValueError(f"not a chat completion ({type(err).__name__}: {err})") from None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    tokens = {k: usage.get(k) for k in ("prompt_tokens", "completion_tokens")
              if isinstance(usage.get(k), int) and not isinstance(usage.get(k), bool)}
    return {"content": content, "refusal": message.get("refusal"), "finish_reason": choice.get("finish_reason"),
            "usage": tokens}


def chat(url, model, messages, key=None, *, max_tokens=1024, timeout_s=120.0, tries=5, backoff_s=2.0,
         key_name="OPENAI_API_KEY", sleep=time.sleep):
    """The judge's reply to `messages` (parse_reply's dict, plus "tries"), temperature 0."""
    body = json.dumps({"model": model, "messages": messages, "temperature": 0, "max_tokens": max_tokens}).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    kind = why = None
    for attempt in range(1, tries + 1):
        wait = backoff_s * 2 ** (attempt - 1)
        request = urllib.request.Request(endpoint(url), data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                raw = response.read()
            try:
                return {**parse_reply(raw), "tries": attempt}
            except (ValueError, UnicodeDecodeError) as err:
                kind, why = "malformed", f"the reply is not the API's JSON ({_masked(err, key)})"
        except urllib.error.HTTPError as err:
            detail = _masked(err.read(2000).decode("utf-8", "replace"), key)
            if err.code in (401, 403):
                raise UserError(f"the judge at {url} refused the request (HTTP {err.code}: {detail[:200]}); check "
                                f"the key in ${key_name}") from None
            if err.code == 404:
                raise UserError(f"the judge at {url} answered HTTP 404 for {endpoint(url)} ({detail[:200]}); "
                                "--judge_url is the API's base (e.g. https://api.openai.com/v1) and --judge_model a "
                                "model it serves") from None
            kind, why = "http", f"HTTP {err.code}: {detail[:300]}"
            if err.code not in (408, 429) and err.code < 500:
                raise JudgeError(kind, why, attempt) from None  # a bad request is not fixed by asking again
            wait = _retry_after(err) if _retry_after(err) is not None else wait
        except (TimeoutError, socket.timeout) as err:
            kind, why = "timeout", f"no reply within {timeout_s:g} s ({_reason(err)})"
        except urllib.error.URLError as err:
            if isinstance(err.reason, (TimeoutError, socket.timeout)):
                kind, why = "timeout", f"no reply within {timeout_s:g} s"
            else:
                kind, why = "connection", _reason(err)
        except (ConnectionError, http.client.HTTPException) as err:  # dropped mid-reply
            kind, why = "connection", f"{type(err).__name__}: {_reason(err)}"
        if attempt < tries:
            sleep(wait)
    if kind == "connection":
        raise UserError(f"cannot reach the judge at {url} ({why}, {tries} tries); start the server or correct "
                        "--judge_url, then run the same command again: it resumes")
    raise JudgeError(kind, f"{why} ({tries} tries)", tries)
