"""The GPU plan (`masdsl.plan.gpu_plan`), the recipes in configs/ and benchmarks/gpu_smoke.sh.

The calculator's parameter count is checked against transformers' Qwen3 (on the meta device, no
download), its activation formula against the bytes autograd really saves in a small Qwen3, and
the recipes' headers and the docs against what it computes now.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import masdsl
from masdsl.config import check_names, policy_override, resolve_config
from masdsl.plan import gpu_plan as gp
from masdsl.plan.run_plan import resolve_run

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "benchmarks" / "gpu_smoke.sh"


def qwen3(m: gp.ModelDims, layers: int | None = None):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(hidden_size=m.hidden, num_hidden_layers=layers or m.layers, num_attention_heads=m.heads,
                      num_key_value_heads=m.kv_heads, head_dim=m.head_dim, intermediate_size=m.intermediate,
                      vocab_size=m.vocab, tie_word_embeddings=m.tied, attn_implementation="sdpa")
    return Qwen3ForCausalLM(cfg)


@pytest.mark.parametrize("m", gp.MODELS, ids=lambda m: m.name)
def test_parameter_count_equals_transformers(m):
    with torch.device("meta"):
        model = qwen3(m)
    assert sum(p.numel() for p in model.parameters()) == m.params()
    linear = sum(mod.weight.numel() for mod in model.modules() if isinstance(mod, torch.nn.Linear))
    assert linear == m.linear_params()


SMALL = gp.ModelDims("small", hidden=192, layers=1, heads=6, kv_heads=2, head_dim=32, intermediate=320, vocab=500, tied=True)


def saved_bytes(layers: int, tokens: int, master_fp32: bool, checkpointing: bool) -> int:
    """Bytes of the tensors autograd saves in a forward (each storage once, parameters left out)."""
    torch.manual_seed(0)
    model = qwen3(SMALL, layers)
    if not master_fp32:
        model = model.to(torch.bfloat16)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(0, SMALL.vocab, (1, tokens))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=master_fp32)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
        model(input_ids=ids, logits_to_keep=1, use_cache=False)
    return sum(seen.values())


@pytest.mark.parametrize("master_fp32", [True, False], ids=["fp32-master-autocast", "bf16-weights"])
def test_layer_activations_equal_what_autograd_saves(master_fp32):
    tokens = 64
    per_layer = saved_bytes(2, tokens, master_fp32, False) - saved_bytes(1, tokens, master_fp32, False)
    casts = 2 * SMALL.linear_params_per_layer() if master_fp32 else 0  # the layer's bf16 weight copies
    assert per_layer - casts == SMALL.layer_activation_bytes(tokens, master_fp32)
    # gradient checkpointing keeps each layer's input only (float32 residual under master weights)
    kept = saved_bytes(2, tokens, master_fp32, True) - saved_bytes(1, tokens, master_fp32, True)
    assert kept == (4 if master_fp32 else 2) * SMALL.hidden * tokens


def test_plan_arithmetic():
    r = gp.Recipe("x", learner_workers=4, engines_in_actors=True, policies=2)
    p = gp.plan(gp.QWEN3_8B, r)
    rank = next(g for g in p.gpus if g.what == "learner rank")
    assert rank.count == 8 and rank.parts["AdamW"] == 8 * gp.QWEN3_8B.params()
    assert p.comm["DDP all-reduce per rank"] == r.optimizer_steps() * 2 * 4 * gp.QWEN3_8B.params() * 3 / 4
    sharded = gp.plan(gp.QWEN3_8B, gp.variant(r, fsdp=True))
    rank_f = next(g for g in sharded.gpus if g.what == "learner rank")
    assert rank_f.parts["AdamW"] == rank.parts["AdamW"] / 4 and "FSDP all-gather per rank" in sharded.comm
    # one FSDP unit per layer: the root unit (embeddings, LM head) and two layers gathered in float32
    m = gp.QWEN3_8B
    assert m.root_params() + m.layers * m.layer_params() == m.params()
    assert rank_f.parts["FSDP gathered"] == 4 * (m.root_params() + 2 * m.layer_params()) < 4 * m.params() / 4
    # every rank keeps the whole AdamW state from before and after the update on the host, FSDP too
    assert sharded.host["AdamW copies"] == p.host["AdamW copies"] == 2 * 8 * m.params()
    assert gp.plan(m, gp.Recipe("w")).host == {}  # no learner workers: no host copies
    one = gp.Recipe("y", sleep=True, util=0.6)
    asleep, awake = gp.plan(gp.QWEN3_1_7B, one).gpus[0], gp.plan(gp.QWEN3_1_7B, gp.variant(one, sleep=False)).gpus[0]
    assert awake.update - asleep.update == pytest.approx(0.6 * 80 * gp.GIB)
    assert gp.plan(gp.QWEN3_8B, gp.Recipe("z")).problems()  # full 8B on one 80 GiB card does not fit


def recipe(name: str):
    config, workflow, hardware = gp.RECIPES[name]
    wf = masdsl.load(ROOT / workflow)
    cfg = resolve_config(wf.train, ROOT / config)
    return wf, cfg, gp.recipe_from_plan(name, resolve_run(wf, cfg), hardware)


@pytest.mark.parametrize("name", list(gp.RECIPES))
def test_recipe_resolves_and_its_header_is_the_computed_plan(name):
    wf, cfg, r = recipe(name)
    check_names(cfg, wf)
    resolve_run(wf, cfg)  # what `masdsl run` checks before any model loads
    assert cfg.runtime.device == "cuda" and cfg.runtime.engine == "vllm" and cfg.runtime.dtype == "bfloat16"
    text = (ROOT / gp.RECIPES[name][0]).read_text()
    block = text.split(gp.HEADER_BEGIN + "\n", 1)[1].split(gp.HEADER_END, 1)[0]
    plans = gp.recipe_plans(r)
    assert block.splitlines() == [line for p in plans for line in gp.header_lines(p)]
    assert not plans[0].problems(), plans[0].problems()  # the recipe's own model fits
    assert plans[0].gpus_used <= r.hardware.gpus_per_node * r.hardware.nodes


def test_recipes_fit_their_models():
    assert "Qwen3-1.7B" in policy_override(recipe("gpu_8")[1], "tool_p").model
    _, cfg, r = recipe("gpu_2x8")
    assert policy_override(cfg, "tool_p").model == "Qwen/Qwen3-8B" and cfg.runtime.learner_fsdp
    assert not gp.plan(gp.QWEN3_8B, r).problems()
    assert cfg.runtime.ray_address == "auto"


def test_docs_hold_the_computed_plan():
    spec = importlib.util.spec_from_file_location("gpu_plan_bench", ROOT / "benchmarks" / "gpu_plan.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rs = bench.recipes()
    plans = bench.all_plans(rs)
    perf = (ROOT / "docs" / "performance.md").read_text()
    assert bench.perf_block(plans, rs) in perf
    assert perf.index("## scale") < perf.index(bench.BEGIN)
    cluster = (ROOT / "docs" / "cluster.md").read_text()
    assert bench.cluster_block(plans, rs) in cluster
    assert cluster.index("## Recipes") < cluster.index("## Starting a cluster")


def run_smoke(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SMOKE)], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)


def test_smoke_script_parses():
    assert subprocess.run(["bash", "-n", str(SMOKE)]).returncode == 0
    if shutil.which("shellcheck"):
        assert subprocess.run(["shellcheck", str(SMOKE)]).returncode == 0


def test_smoke_skips_without_gpu(tmp_path):
    """No nvidia-smi, or one that lists no GPU: a SKIP line, exit 0, nothing run."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (fake / "nvidia-smi").chmod(0o755)
    for path in (f"{fake}:/usr/bin:/bin", "/usr/bin:/bin"):
        if path == "/usr/bin:/bin" and any(Path(d, "nvidia-smi").exists() for d in ("/usr/bin", "/bin")):
            continue
        r = run_smoke({**os.environ, "PATH": path, "MASDSL_PYTHON": sys.executable})
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "gpu_smoke: SKIP: no GPU on this machine (nvidia-smi lists none)"


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs a GPU machine (nvidia-smi)")
def test_smoke_runs_on_gpus():  # pragma: no cover - only where a GPU is present
    r = subprocess.run(["bash", str(SMOKE)], capture_output=True, text=True, timeout=3600, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tokens/s" in r.stdout and "sync s" in r.stdout
    rows = [line.split() for line in r.stdout.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert len(rows) == 2 and all(float(row[1]) > 0 for row in rows)
