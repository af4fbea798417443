#!/usr/bin/env bash
# Start (or reuse) both real-model servers of the live suite, in parallel; wait for both.
#
#   start.sh          vLLM on $LIVE_VLLM_PORT (8097) and llama.cpp on $LIVE_LLAMA_PORT (8087)
#   start.sh stop     stop both
#
# The first run installs vLLM's CPU build and builds llama.cpp (10-15 minutes on 2 cores,
# overlapping); later runs reuse both from ~/.cache/gemkit-real-model and start in about 2
# minutes. Each script's output goes to ~/.cache/gemkit-real-model/start-*.log.
set -u
here=$(cd "$(dirname "$0")" && pwd)
logs=${XDG_CACHE_HOME:-$HOME/.cache}/gemkit-real-model
mkdir -p "$logs"
vllm_port=${LIVE_VLLM_PORT:-8097}
llama_port=${LIVE_LLAMA_PORT:-8087}
if [ "${1:-}" = stop ]; then
  bash "$here/vllm-cpu.sh" stop "$vllm_port"
  bash "$here/llama-cpp.sh" stop "$llama_port"
  exit 0
fi
bash "$here/vllm-cpu.sh" "$vllm_port" > "$logs/start-vllm.log" 2>&1 &
vllm=$!
bash "$here/llama-cpp.sh" "$llama_port" > "$logs/start-llama.log" 2>&1 &
llama=$!
status=0
wait "$vllm" || { echo "vLLM did not start; the end of $logs/start-vllm.log:"; tail -20 "$logs/start-vllm.log"; status=1; }
wait "$llama" || { echo "llama.cpp did not start; the end of $logs/start-llama.log:"; tail -20 "$logs/start-llama.log"; status=1; }
[ "$status" = 0 ] && echo "live servers: vLLM http://127.0.0.1:$vllm_port/v1, llama.cpp http://127.0.0.1:$llama_port/v1"
exit "$status"
