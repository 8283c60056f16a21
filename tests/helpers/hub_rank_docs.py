"""Test driver: the documents gptlab.text.sources.iter_hub_documents gives ranks R... of W, written as JSON.

    python tests/helpers/hub_run.py tests/helpers/hub_rank_docs.py REPO CONFIG SEED SHUFFLE_BUFFER WORLD_SIZE OUT \
        RANK [RANK ...]

OUT gets {rank: {"docs": [...], "files": [...], "bytes_read": n}}: what the rank read, with its ReadStats record.
"""
import json
import sys

from gptlab.text.sources import ReadStats, iter_hub_documents


def main(argv):
    repo_id, config, seed, shuffle_buffer, world_size, out = argv[:6]
    result = {}
    for rank in map(int, argv[6:]):
        stats = ReadStats()
        docs = list(iter_hub_documents(repo_id, config, int(seed), rank, int(world_size), int(shuffle_buffer), stats))
        result[rank] = {"docs": docs, "files": stats.files, "bytes_read": stats.bytes_read}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1:])
