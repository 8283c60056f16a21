"""gptlab.evals.file_prints: evaluation files fingerprinted at a run's start and checked before each evaluation
(docs/faults.md, 'Evaluation files cannot change under a run'): any change to the bytes a path leads to is refused
with one UserError naming the file, an untouched file passes."""
import os

import pytest

from gptlab.core.errors import UserError
from gptlab.evals.file_prints import FilePrints


@pytest.fixture
def files(tmp_path):
    paths = []
    for name, text in (("a.jsonl", '{"label": 1}\n'), ("b.jsonl", '{"label": 2}\n')):
        path = tmp_path / name
        path.write_text(text)
        paths.append(str(path))
    return paths


def refused(prints, path, *words):
    with pytest.raises(UserError) as info:
        prints.check(path)
    message = str(info.value)
    assert message.startswith(f"evaluation file {path} changed since the run started (") and "\n" not in message
    for word in words:
        assert word in message, message
    return message


def test_untouched_files_pass_even_when_rewritten_with_the_same_bytes(files):
    prints = FilePrints(files)
    with open(files[0], "w") as f:  # rewritten, same content: the same examples
        f.write('{"label": 1}\n')
    for path in files:
        prints.check(path)


def test_a_file_modified_in_place_with_the_same_size_is_refused(files):
    prints = FilePrints(files)
    with open(files[1], "r+") as f:
        f.seek(len('{"label": '))
        f.write("3")
    refused(prints, files[1], "sha256")
    prints.check(files[0])  # the other file is still the one it was


def test_a_file_replaced_removed_or_grown_is_refused(files, tmp_path):
    prints = FilePrints(files)
    (tmp_path / "new").write_text('{"label": 0}\n{"label": 1}\n')
    os.replace(tmp_path / "new", files[0])
    refused(prints, files[0], "26 bytes, 13 at start")
    os.remove(files[1])
    refused(prints, files[1], "it is gone")


def test_a_link_turned_to_another_file_is_refused(files, tmp_path):
    link = str(tmp_path / "current.jsonl")
    os.symlink(files[0], link)
    prints = FilePrints([link])
    os.remove(link)
    os.symlink(files[1], link)  # the same size, other content
    refused(prints, link, f"it now leads to {files[1]}")


def test_files_missing_at_start_are_not_fingerprinted(files, tmp_path):
    missing = str(tmp_path / "later.jsonl")
    prints = FilePrints([missing, files[0]])
    assert missing not in prints and files[0] in prints
    with open(missing, "w") as f:
        f.write("{}\n")
    prints.check(missing)  # never taken: the run skips it (gptlab.evals.hellaswag.evaluate_hellaswag_in_run)
