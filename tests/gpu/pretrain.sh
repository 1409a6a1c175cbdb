#!/usr/bin/env bash
# Pre-training on a lent GPU as one command that brings the model back: installs what the GPU image lacks
# from carried wheels, checks the carried Wikipedia corpus, prepares it with every core, pre-trains
# pretrain_budget_gpu for MINUTES, exports the model (bf16 safetensors, shards under 16 MiB) and leaves
# it in $OUT with run.json, the step summary and the logs (at most 8 files: what such a machine returns).
#
# Here, once: fill the ignored folder that travels (wheels + corpus; prints its size against 64 MiB):
#   BERT_EXP_DATA=../shared/data bash tests/gpu/pack_carry.sh
# There (the device tool's run, carry [".gpu_carry"], timeout_s 600; the tool sets OUT):
#   bash tests/gpu/pretrain.sh
# On the CPU, every step end to end with a tiny model on one Wikipedia part (tests/gpu/test_pretrain_script.py):
#   DEVICE=cpu BERT_EXP_DATA=../shared/data OUT=/tmp/pretrain_cpu bash tests/gpu/pretrain.sh
#
# Environment: DEVICE gpu (default) | cpu; MINUTES of training (gpu 7, cpu 1); BUDGET, trainer.budget
# itself (default ${MINUTES}m; tokens such as 400k make a run that does not depend on the machine's
# speed); DEADLINE, seconds the whole script may take (gpu 570, inside the tool's 10-minute command
# limit: the training budget shrinks if the steps before it took longer than planned; cpu 0: none);
# CARRY (.gpu_carry); FILES, the corpus as data.files entries, comma-separated (default: the carried
# Wikipedia parts; cpu: part00 of $BERT_EXP_DATA's); OUT (outputs/gpu_pretrain; must be empty); WORK,
# where the runs are written (default outputs/gpu_pretrain_work/<time>); PYTHON (python3).
# Arguments are further overrides for the pre-training run (e.g. trainer.max_steps=200).
#
# Each step has its own time limit, so a step that hangs or fails leaves what the steps before it made:
# training stopped at its limit saves last.ckpt (SIGTERM), which the export reads. The planned GPU run:
# install and checks ~20 s, vocabulary and preparation of the 16 parts (16 groups, a worker each) a
# minute or two, training 7 minutes (compile warm-up included) or what DEADLINE leaves, export ~10 s.
# $OUT then holds model/ (config.json, model.safetensors: BERT-mini with 16k pieces is 14.6 MiB in
# bf16, vocab.txt, the tokenizer configs), run.json, summary.txt, logs.tar.gz (every step's log, the
# runs' configs and metrics.csv): 8 files. Not measured here: the data loader's own rate (no bench of it
# yet); run.json's throughput is the whole training loop's, the data loader included.
set -u
cd "$(dirname "$0")/../.."
DEVICE=${DEVICE:-gpu}
CARRY=${CARRY:-.gpu_carry}
OUT=${OUT:-outputs/gpu_pretrain}
PY=${PYTHON:-python3}
case $DEVICE in
  gpu) MINUTES=${MINUTES:-7}; DEADLINE=${DEADLINE:-570}
       default_files="$CARRY/corpus/wikipedia/part*.txt.xz"
       # one group (and one worker) a Wikipedia part: a part is 3.4 MB of xz, counted as 13.6 MB of text
       device_overrides=(data.prepare.group_bytes=8MB)
       prepare_overrides=(callbacks.compile_model=null) ;;
  cpu) MINUTES=${MINUTES:-1}; DEADLINE=${DEADLINE:-0}
       default_files="${BERT_EXP_DATA:-$CARRY}/corpus/wikipedia/part00.txt.xz"
       # pretrain_tiny's shape: BERT-tiny, 2,048 pieces, sequences of 64, batch 32
       device_overrides=(hardware=cpu model=tiny data.tokenizer.vocab_size=2048 data.instances.max_seq_length=64
                         global_batch_size=32 data.prepare.num_workers=2 trainer.val_check_interval=100
                         trainer.limit_val_batches=5 callbacks.last_checkpoint.every_n_train_steps=100)
       prepare_overrides=() ;;
  *) echo "DEVICE=$DEVICE: gpu or cpu" >&2; exit 2 ;;
esac
FILES=${FILES:-$default_files}
WORK=${WORK:-outputs/gpu_pretrain_work/$(date +%Y%m%d_%H%M%S)}
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled BERT_EXP_CACHE=${BERT_EXP_CACHE:-/tmp/bert_exp_gpu_cache}
mkdir -p "$OUT" "$WORK/logs"
if [ -n "$(ls -A "$OUT")" ]; then echo "OUT=$OUT is not empty: choose an empty folder" >&2; exit 2; fi
OUT=$(cd "$OUT" && pwd); WORK=$(cd "$WORK" && pwd)
LOGS=$WORK/logs
MAX_FILES=8 MAX_FILE_BYTES=$((16 << 20))

{ date -u +%FT%TZ; echo "DEVICE=$DEVICE MINUTES=$MINUTES BUDGET=${BUDGET:-} DEADLINE=$DEADLINE FILES=$FILES"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
  echo "cores: $(nproc)"; } > "$LOGS/device.txt" 2>&1

collect() {  # $OUT/summary.txt and $OUT/logs.tar.gz, refreshed after every step (they come back if a later one hangs)
  cp "$LOGS/summary.txt" "$OUT/summary.txt"
  tar -czf "$WORK/logs.tar.gz" -C "$WORK" --exclude='*.ckpt' --exclude=./model --exclude=./corpus \
    --exclude=./logs.tar.gz . 2>/dev/null
  [ -s "$WORK/logs.tar.gz" ] && mv "$WORK/logs.tar.gz" "$OUT/logs.tar.gz"
}

step() {  # step NAME LIMIT_S COMMAND...: output in logs/NAME.log, time and status in summary.txt
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout -k 20 "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc in $((SECONDS - start)) s (limit $limit s)" | tee -a "$LOGS/summary.txt"
  collect
  return $rc
}

left() {  # seconds left before DEADLINE, less $1; a large number without a deadline
  if [ "$DEADLINE" -gt 0 ]; then echo $((DEADLINE - SECONDS - $1)); else echo 100000; fi
}

limit_of() {  # limit_of MOST RESERVE: MOST seconds, or what the deadline leaves after RESERVE (at least 30)
  local n; n=$(left "$2")
  [ "$n" -gt "$1" ] && n=$1
  [ "$n" -lt 30 ] && n=30
  echo "$n"
}

# (a) the packages the GPU image lacks, from the carried wheels (nothing is installed where they import)
MODULES="import hydra, omegaconf, antlr4, platformdirs, pooch, litdata, boto3"
if ! $PY -c "$MODULES" 2>/dev/null; then
  step install 90 $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$CARRY"/wheels/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
step imports 60 $PY -c "$MODULES; import bert_exp.runner, bert_exp.data.corpus.datamodule; print('imports ok')" || exit 1

# (b) the corpus: read as it is (.txt.xz, the project reads xz itself); where this Python cannot read xz,
# unpacked with the xz command, a process a file
entries=()
IFS=',' read -ra globs <<< "$FILES"
for g in "${globs[@]}"; do
  case $g in /*) entries+=("$g") ;; *) entries+=("$PWD/$g") ;; esac
done
step corpus 60 $PY - "$WORK/files.txt" "${entries[@]}" <<'EOF'
import glob, os, sys
files = sorted({f for pattern in sys.argv[2:] for f in glob.glob(pattern)})
if not files:
    sys.exit(f"no corpus files match {sys.argv[2:]}")
open(sys.argv[1], "w").write("".join(f + "\n" for f in files))
print(f"{len(files)} files, {sum(map(os.path.getsize, files)):,} bytes, from {files[0]} to {files[-1]}")
try:
    import lzma
except ImportError:
    sys.exit(3)
for f in files:
    if f.endswith(".xz"):
        lzma.open(f).read(1 << 16)  # a damaged file fails here, not an hour into training
EOF
rc=$?
if [ $rc -eq 3 ] && command -v xz >/dev/null; then
  mkdir -p "$WORK/corpus"
  mapfile -t listed < "$WORK/files.txt"
  step unpack 120 bash -c 'd=$1; shift; for f in "$@"; do xz -dc "$f" > "$d/$(basename "$f" .xz)" & done; wait' \
    _ "$WORK/corpus" "${listed[@]}"
  entries=("$WORK/corpus/*")
elif [ $rc -ne 0 ]; then
  echo "no corpus to train on: $LOGS/corpus.log" >&2; cat "$LOGS/corpus.log" >&2; exit 1
fi
files_override="data.files=[$(IFS=','; echo "${entries[*]}")]"
common=(+experiment=pretrain_budget_gpu "$files_override" logger=csv "${device_overrides[@]}" "$@")

# (c) the vocabulary and the prepared instances, in the cache the training run then finds them in: a run
# of one step (the preparation uses every core: data.prepare.num_workers is one per CPU)
step prepare "$(limit_of 300 120)" $PY -m bert_exp "${common[@]}" "${prepare_overrides[@]}" \
  trainer.budget=null trainer.max_steps=1 trainer.val_check_interval=1 trainer.limit_val_batches=1 \
  hydra.run.dir="$WORK/prepare"

# (d) pre-training: MINUTES, or what the deadline leaves (about 40 s for start-up, the last validation
# and checkpoint, 30 s for the export)
if [ -z "${BUDGET:-}" ]; then
  seconds=$((MINUTES * 60))
  [ "$(left 70)" -lt "$seconds" ] && seconds=$(left 70)
  [ "$seconds" -lt 30 ] && seconds=30
  BUDGET=${seconds}s
fi
echo "training budget: $BUDGET" | tee -a "$LOGS/summary.txt"
step pretrain "$(limit_of 3600 30)" $PY -m bert_exp "${common[@]}" trainer.budget="$BUDGET" hydra.run.dir="$WORK/run"

# (e) the model, exported as bf16 safetensors in shards of at most 15 MiB, with run.json into $OUT
step export 90 $PY -m bert_exp.export "$WORK/run" "$WORK/model" --dtype bf16 --max-shard-size 15MB
if [ -d "$WORK/model" ]; then
  cp -r "$WORK/model" "$OUT/model"
fi
[ -f "$WORK/run/run.json" ] && cp "$WORK/run/run.json" "$OUT/run.json"
$PY - "$WORK/run/run.json" <<'EOF' 2>&1 | tee -a "$LOGS/summary.txt"
import json, sys
try:
    info = json.load(open(sys.argv[1]))
except (OSError, ValueError) as err:
    sys.exit(f"no run.json: {err}")
metrics = info.get("metrics") or {}
print("run:", info.get("status"), "| step", info.get("global_step"), "| wall", info.get("wall_seconds"), "s")
print("throughput:", json.dumps(info.get("throughput")), "| compile:", json.dumps(info.get("compile")))
print("metrics:", json.dumps({k: v for k, v in metrics.items() if "loss" in k or "acc" in k}))
EOF
collect

# what comes back: at most 8 files of under 16 MiB; the summary and run.json are in logs.tar.gz too
count() { find "$OUT" -type f | wc -l; }
for spare in summary.txt run.json; do
  if [ "$(count)" -gt "$MAX_FILES" ]; then rm -f "$OUT/$spare"; echo "left out of OUT (in logs.tar.gz): $spare"; fi
done
echo "OUT: $(count) files (at most $MAX_FILES), $(du -sb "$OUT" | cut -f1) bytes"
find "$OUT" -type f -printf '%s %P\n' | sort -k2 | while read -r size name; do
  flag=""; [ "$size" -ge "$MAX_FILE_BYTES" ] && flag="  <- over 16 MiB: it will not come back"
  echo "  $name $size$flag"
done
[ "$(count)" -le "$MAX_FILES" ] || echo "more than $MAX_FILES files in OUT: not all will come back" >&2
cat "$LOGS/summary.txt"
[ -f "$OUT/model/config.json" ]
