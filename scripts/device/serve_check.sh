#!/usr/bin/env bash
# A user's first run at real size on the device machine: make-checkpoint, `bench load` (page cache
# and --cold), `plan`, then `serve` with default flags answering a chat request, and the device
# memory nvidia-smi reports against the plan. Usage (repository root on the device machine):
#   bash device_carry/serve_check.sh kimi-bf16|nvfp4|dsv3-fp8
source "$(dirname "$0")/env.sh"
case "${1:-kimi-bf16}" in
  kimi-bf16) like="--like deepseek-v3-bf16 --layers 4 --experts 64 --vocab 163840 --heads 64 --first-dense 1" ;;
  nvfp4) like="--like kimi-k2.5-nvfp4 --layers 4 --experts 384" ;;
  dsv3-fp8) like="--like deepseek-v3-fp8 --layers 3 --experts 256 --first-dense 1" ;;
  *) echo "serve_check.sh: unknown '$1'"; exit 2 ;;
esac
dir=/tmp/ckpt-$1
rm -rf "$dir"
tessera make-checkpoint $like --tokenizer "$TESSERA_FIXTURES/tokenizers/deepseek-v3" --out "$dir" 2>&1 | tail -1
du -sh "$dir"
tessera bench load --device cuda --model "$dir" 2>&1 | tail -4
tessera bench load --device cuda --model "$dir" --cold 2>&1 | tail -4
tessera plan --device cuda --model "$dir" 2>&1 | grep -E "weights|workspace|memory|kv pool|max context|plan " | cut -c1-220
log="$OUT/serve-$1.log"
tessera serve --device cuda --model "$dir" --port 18080 > "$log" 2>&1 &
pid=$!
t0=$(date +%s)
until curl -sf localhost:18080/readyz > /dev/null; do
  sleep 1
  if ! kill -0 $pid 2>/dev/null; then echo "serve exited:"; tail -20 "$log"; exit 1; fi
  if [ $(( $(date +%s) - t0 )) -gt 300 ]; then echo "serve not ready after 300 s"; tail -20 "$log"; exit 1; fi
done
echo "ready after $(( $(date +%s) - t0 )) s"
model=$(curl -s localhost:18080/v1/models | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
curl -s localhost:18080/v1/chat/completions -H 'Content-Type: application/json' \
  -d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_tokens\":16}" | cut -c1-300
echo
python3 "$(dirname "$0")/constrained_check.py" 18080 || echo "constrained_check FAILED"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv
grep -E "plan: memory" "$log" | cut -c1-300
kill -TERM $pid; wait $pid; echo "serve exit $?"
rm -rf "$dir"
