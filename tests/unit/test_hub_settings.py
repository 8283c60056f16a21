"""The Hugging Face settings in process: which proxy a URL goes through (as urllib and httpx read the variables),
credentials never shown, the Hub copy of HellaSwag found by listing and turned back into the upstream bytes, and
the GitHub fallback when the copy cannot be read (no pyarrow). The downloads themselves: tests/e2e/test_hub.py."""
import builtins
import json
import pathlib

import pytest

from conftest import HELLASWAG_VAL
from helpers.hellaswag_file import PUBLISHED_SHA256
from hub_standin import hellaswag_parquet

from gptlab.dataset import hellaswag_file
from gptlab.text.sources import proxy_hint, proxy_in_use, without_credentials

PROXY_VARIABLES = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                   "no_proxy", "REQUEST_METHOD"]


@pytest.fixture
def env(monkeypatch):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_proxy_of_a_url_is_read_as_the_clients_read_it(env):
    assert proxy_in_use("https://huggingface.co") is None
    env.setenv("HTTPS_PROXY", "http://bob:pa:ss@10.0.0.1:3128")
    assert proxy_in_use("https://huggingface.co") == ("http://10.0.0.1:3128", "HTTPS_PROXY")
    assert proxy_in_use("http://127.0.0.1:8080") is None  # an http:// URL goes through HTTP_PROXY only
    env.setenv("https_proxy", "10.0.0.2:8888")  # lowercase wins, as in urllib; no scheme means http:// (httpx)
    assert proxy_in_use("https://huggingface.co") == ("http://10.0.0.2:8888", "https_proxy")
    env.setenv("NO_PROXY", "example.org, .huggingface.co")
    assert proxy_in_use("https://cdn.huggingface.co/x") is None and proxy_in_use("https://huggingface.co") is None
    assert proxy_in_use("https://github.com")[0] == "http://10.0.0.2:8888"
    env.setenv("ALL_PROXY", "socks5://10.0.0.3:1080")  # httpx takes it for any scheme, urllib ignores it
    assert proxy_in_use("http://hub.local") == ("socks5://10.0.0.3:1080", "ALL_PROXY")
    assert proxy_in_use("http://hub.local", all_proxy=False) is None


def test_credentials_are_never_shown():
    assert without_credentials("http://u:p@10.0.0.1:3128") == "http://10.0.0.1:3128"
    assert without_credentials("ProxyError: http://us:p@ss@h:1/x refused; https://a@b.c/d") == \
        "ProxyError: http://h:1/x refused; https://b.c/d"
    assert without_credentials("mail me@host, not a URL") == "mail me@host, not a URL"


def test_the_hint_names_the_proxy_or_suggests_one(env):
    assert "set HTTPS_PROXY" in proxy_hint(["https://huggingface.co"]) and "HF_ENDPOINT" in proxy_hint()
    env.setenv("HTTP_PROXY", "http://x:y@10.0.0.1:3128")
    env.setenv("HTTPS_PROXY", "http://x:y@10.0.0.1:3128")
    assert proxy_hint(["http://hub.local"], ["https://raw.githubusercontent.com/f"]) == (
        "check the proxy http://10.0.0.1:3128, or unset HTTP_PROXY and HTTPS_PROXY (or list the host in NO_PROXY) "
        "to connect directly")


def test_the_validation_parquet_is_found_by_its_name():
    main = [".gitattributes", "README.md", "data/test-00000-of-00001.parquet", "data/train-00000-of-00001.parquet",
            "data/validation-00000-of-00001.parquet"]
    assert hellaswag_file.hub_validation_files(main) == ["data/validation-00000-of-00001.parquet"]
    converted = ["default/train/0000.parquet", "default/validation/0000.parquet", "default/validation/0001.parquet"]
    assert hellaswag_file.hub_validation_files(converted) == ["default/validation/0000.parquet",
                                                         "default/validation/0001.parquet"]
    # one config only (its shards in order), and a name that merely contains "validation" is not the split
    assert hellaswag_file.hub_validation_files(["b/validation/0000.parquet", "a/validation/0000.parquet"]) == \
        ["a/validation/0000.parquet"]
    assert hellaswag_file.hub_validation_files(["hellaswag.py", "data/train.parquet", "validation_notes.md",
                                           "data/cross_validation.parquet", "data/validation_old.parquet"]) == []


def test_hub_rows_give_back_the_upstream_lines(tmp_path):
    # rows 3240-3249 cross from ActivityNet rows to WikiHow rows, whose keys upstream writes in another order
    lines = pathlib.Path(HELLASWAG_VAL).read_bytes().splitlines(keepends=True)[3240:3250]
    path = tmp_path / "validation-00000-of-00001.parquet"
    path.write_bytes(hellaswag_parquet([json.loads(line) for line in lines]))
    with hellaswag_file._upstream_lines([str(path)]) as stream:
        rebuilt = b"".join(iter(stream.read, b""))
    assert rebuilt == b"".join(lines)


def test_without_pyarrow_the_github_file_is_used(env, tmp_path, capsys):
    from huggingface_hub import constants

    env.setattr(constants, "HF_HUB_OFFLINE", False)
    env.setenv(hellaswag_file.URL_ENV, pathlib.Path(HELLASWAG_VAL).resolve().as_uri())  # GitHub's file, here
    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    env.setattr(builtins, "__import__", no_pyarrow)
    out = tmp_path / "hellaswag_val.jsonl"
    path, status, source = hellaswag_file.fetch_hellaswag(out=str(out), progress=False, hub_repo="nobody/none")
    assert (status, source) == ("written", pathlib.Path(HELLASWAG_VAL).resolve().as_uri())
    assert hellaswag_file.sha256_file(out) == PUBLISHED_SHA256
    assert "needs pyarrow" in capsys.readouterr().err  # said, and nothing asked of the Hub (no endpoint here)
