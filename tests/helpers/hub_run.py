"""Run a script as __main__ with one change to `datasets`: no 5-second sleep when a stream closes.

    python tests/helpers/hub_run.py SCRIPT [ARGS ...]            (also as torchrun's entry point)

datasets 5.x sleeps `datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN` (5 s) whenever a shuffled multi-file parquet
stream is closed (a guard against apache/arrow#45214 at interpreter exit). That is nothing next to a real
download but would be most of each test's time, so the Hub tests run the unchanged scripts through this wrapper.
"""
import runpy
import sys

import datasets.config

datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN = 0

if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")
