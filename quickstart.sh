#!/usr/bin/env bash
# The whole gptlab pipeline on the bundled sample (150 FineWeb-Edu documents, offline):
#   tokenizer → token shards → HellaSwag file → a short training run → leaderboard and plot.
# CPU: a few minutes. With GPUs: every visible GPU via torchrun. Re-running it reuses what is already there.
# SEED, STEPS and HELLASWAG_LIMIT may be set in the environment (the committed baselines: SEED=0, 1, 2).
set -euo pipefail
cd "$(dirname "$0")"

SAMPLE=data/sample/fineweb_edu_150docs.jsonl
TOKENIZER=quickstart_v1000_n400000.pkl
SEED=${SEED:-0}
STEPS=${STEPS:-120}
HELLASWAG_LIMIT=${HELLASWAG_LIMIT:-1000}

echo "== 1/5 tokenizer: exact byte-level BPE, vocab 1000 + <|endoftext|>"
if [ -f "tokenizers/$TOKENIZER" ]; then
  echo "tokenizers/$TOKENIZER is already there"
else
  python train_tokenizer.py --input "$SAMPLE" --samples 400000 --vocabsize 1000 --name quickstart
fi

echo "== 2/5 token shards (resumes / skips finished shards)"
python download_fineweb.py --input "$SAMPLE" --tokenizer "$TOKENIZER" --val_tokens 16384 --shard_size 50000 --num_shards 3

echo "== 3/5 HellaSwag validation set (bundled copy, checksum-verified)"
python download_hellaswag.py --source data/sample/hellaswag_val.jsonl.gz

echo "== 4/5 train a 6-layer, 128-dim GPT for $STEPS steps (seed $SEED)"
GPUS=$(python -c "import torch; print(torch.cuda.device_count())")
if [ "$GPUS" -gt 0 ]; then
  LAUNCH=(torchrun --standalone --nproc_per_node="$GPUS")
else
  LAUNCH=(python)
fi
TRAIN_OUT=$(mktemp)
trap 'rm -f "$TRAIN_OUT"' EXIT
# --preset quickstart: 6 layers of dim 128 (4 heads), rows of 256, 4096 tokens per step, validation every 20 steps
"${LAUNCH[@]}" train_gpt.py --preset quickstart --model_name Quickstart --tokenizer "$TOKENIZER" \
  --train_steps "$STEPS" --hellaswag_limit "$HELLASWAG_LIMIT" --seed "$SEED" | tee "$TRAIN_OUT"

echo "== 5/5 leaderboard and plot"
RUN=$(sed -n 's/^run folder: //p' "$TRAIN_OUT" | head -n 1)  # the folder train_gpt.py just made
python compare_experiments.py --no-plot
python compare_experiments.py "$RUN" --plot "$RUN/compare.png" --overwrite --no-write > /dev/null
echo
echo "Done. This run: $RUN (metrics.csv, training_log.txt, results.json, code/, compare.png)"
echo "All runs: experiments/LEADERBOARD.md"
