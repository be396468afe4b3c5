"""The computed GPU plan of the shipped recipes (configs/gpu_1.yaml, gpu_8.yaml, gpu_2x8.yaml).

    .venv/bin/python benchmarks/gpu_plan.py            # print the tables
    .venv/bin/python benchmarks/gpu_plan.py --write    # and write them into the recipes' headers,
                                                       # docs/performance.md (## scale) and
                                                       # docs/cluster.md (## Recipes)

Every number comes from `masdsl.plan.gpu_plan` (memory per GPU, bytes per step) applied to
each recipe as `masdsl run` resolves it (the config over its workflow), for Qwen3-1.7B and
Qwen3-8B. Nothing is measured here: tests/plan/test_gpu_plan.py checks the parameter count
against transformers and the activation formula against what autograd saves.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import masdsl  # noqa: E402
from masdsl.config import resolve_config  # noqa: E402
from masdsl.plan import gpu_plan as gp  # noqa: E402
from masdsl.plan.run_plan import resolve_run  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from perf_doc import replace_block, update  # noqa: E402

PERF, CLUSTER = ROOT / "docs" / "performance.md", ROOT / "docs" / "cluster.md"
BEGIN, END = "<!-- scale:gpu_plan -->", "<!-- /scale:gpu_plan -->"
RBEGIN, REND = "<!-- cluster:recipes -->", "<!-- /cluster:recipes -->"
ITEMS = ("weights", "grads", "AdamW", "bf16 copy", "FSDP gathered", "FSDP unsharded grads", "activations", "other policies",
         "driver's weights", "engine", "engine (asleep)")


def recipes() -> dict[str, gp.Recipe]:
    out = {}
    for name, (config, workflow, hardware) in gp.RECIPES.items():
        wf = masdsl.load(ROOT / workflow)
        cfg = resolve_config(wf.train, ROOT / config)
        out[name] = gp.recipe_from_plan(name, resolve_run(wf, cfg), hardware)
    return out


def memory_table(plans: list[gp.Plan]) -> str:
    head = "| recipe | model | GPU | count | " + " | ".join(ITEMS) + " | rollout | update |"
    rows = [head, "|" + "---|" * 4 + "--:|" * (len(ITEMS) + 2)]
    for p in plans:
        for g in p.gpus:
            cells = [gp.gib(g.parts[k]) if k in g.parts else "" for k in ITEMS]
            count = str(g.count) if g.count else "shares a Ray GPU"
            rows.append(f"| {p.recipe.name} | {gp.label(p)} | {g.what} | {count} | " + " | ".join(cells)
                        + f" | {gp.gib(g.rollout)} | {gp.gib(g.update)} |")
    return "\n".join(rows)


def summary_table(plans: list[gp.Plan]) -> str:
    rows = ["| recipe | model | GPUs used | fullest GPU GiB | fits | KV per engine GPU: tick / pool GiB | per step and policy "
            "| host RAM per learner rank |", "|---|---|--:|--:|---|--:|---|---|"]
    for p in plans:
        hw = p.recipe.hardware
        bad = p.problems()
        comm = "; ".join(f"{k} {gp.gib(v)} GiB" for k, v in p.comm.items())
        host = "; ".join(f"{k} {gp.gib(v)} GiB" for k, v in p.host.items())
        rows.append(f"| {p.recipe.name} | {gp.label(p)} | {p.gpus_used} of {hw.gpus_per_node * hw.nodes} | "
                    f"{gp.gib(p.worst())} of {hw.gpu_gib:g} | {'no: ' + '; '.join(bad) if bad else 'yes'} | "
                    f"{gp.gib(p.kv_needed)} / {gp.gib(p.kv_pool)} ({p.kv_share():.0%} at once) | {comm} | {host or '-'} |")
    return "\n".join(rows)


def all_plans(rs: dict[str, gp.Recipe]) -> list[gp.Plan]:
    return [p for r in rs.values() for p in gp.recipe_plans(r)]


def perf_block(plans: list[gp.Plan], rs: dict[str, gp.Recipe]) -> str:
    steps = "; ".join(f"{n}: {r.batch} tasks x K {r.samples} x {r.turns} turns x {r.roles_per_policy} role(s) = "
                      f"{r.rows()} rows, {r.optimizer_steps()} optimizer steps of {r.mini_batch_size}" for n, r in rs.items())
    return f"""{BEGIN}
### computed GPU plan

Computed, not measured: `.venv/bin/python benchmarks/gpu_plan.py` applies
`masdsl.plan.gpu_plan` to each recipe in `configs/` as `masdsl run` resolves it over its
workflow (`gpu_1`: workflows/plan_path.mas; `gpu_8`, `gpu_2x8`: workflows/plan_path_per_role.mas),
for Qwen3-1.7B and Qwen3-8B, on 80 GiB cards. GiB per GPU at the update's peak, by item; rollout
and update are the two phases' totals (gradients and activations exist only in the update, a
sleeping engine only in the rollout). What each item counts is in the module's docstring: the
parameter count equals transformers' `Qwen3ForCausalLM` and the per-layer activation bytes equal
what autograd saves in it (both checked in tests/plan/test_gpu_plan.py); the logits term (12
bytes x vocab per response token) and the engine's reservation are estimates from the code.

{memory_table(plans)}

{summary_table(plans)}

The traffic is per training step and per policy ({steps}); "per rank" is what each rank sends (and receives) over the
interconnect, the other lines cross PCIe and the network once.
{END}"""


def cluster_block(plans: list[gp.Plan], rs: dict[str, gp.Recipe]) -> str:
    one, eight, two = rs["gpu_1"], rs["gpu_8"], rs["gpu_2x8"]
    return f"""{RBEGIN}
## Recipes

Three configurations in `configs/` size a run to the GPUs at hand; each header holds its commands,
what runs on which GPU and the computed memory per GPU (`masdsl.plan.gpu_plan`, rewritten by
`benchmarks/gpu_plan.py --write`, checked against the files by the tests). All three carry the
paper's training settings (configs/paper.yaml), bound prompts at {one.prompt_tokens} tokens and give every
role, whatever the workflow calls it, the paper's reply budget of {one.response_tokens} tokens:

```yaml
sample:
  "*":                 # every role (quoted: YAML reads *x as an alias); on the command line 'sample.*.max_tokens=N'
    max_tokens: {one.response_tokens}
```

A role's own key still wins (`sample.planner.max_tokens=512`), whichever comes first. The plans
below are computed at that budget: where a tick's sequences at the longest need more KV cache than
the engine's pool holds (under 100% "at once"), vLLM queues the rest: slower, not an error.

| recipe | GPUs | command | what goes where |
|---|---|---|---|
| `configs/gpu_1.yaml` | 1 | `masdsl run workflows/plan_path.mas --config configs/gpu_1.yaml` | Qwen3-1.7B, full weights: the learner in the driver, the vLLM engine in the same process on the same GPU, asleep during each update (`runtime.vllm_sleep_mode`) |
| `configs/gpu_8.yaml` | 8, one node | `masdsl run workflows/plan_path_per_role.mas --config configs/gpu_8.yaml` | Qwen3-1.7B per role: each policy on {eight.learner_workers} DDP learner ranks and {eight.engine_replicas} vLLM engines, one GPU each |
| `configs/gpu_2x8.yaml` | 2 nodes x 8 | `CUDA_VISIBLE_DEVICES=7 masdsl run workflows/plan_path_per_role.mas --config configs/gpu_2x8.yaml` (head started with `runtime/start_head.sh --num-gpus=7`) | Qwen3-8B per role: each policy on {two.learner_workers} FSDP learner ranks and {two.engine_replicas} vLLM engines; the driver's copies on the head's 8th GPU |

{summary_table(plans)}

Per-GPU items and the formulas: docs/performance.md, `## scale`, "computed GPU plan".
`benchmarks/gpu_smoke.sh` runs a two-step plan_path training with the recipe that fits the GPUs
present and prints tokens/s, step time and sync time.
{REND}"""


def write_header(path: Path, lines: list[str]) -> None:
    text = path.read_text()
    pattern = re.compile(re.escape(gp.HEADER_BEGIN) + r"\n.*?" + re.escape(gp.HEADER_END), re.S)
    block = "\n".join([gp.HEADER_BEGIN, *lines, gp.HEADER_END]).replace("\\", "\\\\")
    new, n = pattern.subn(block, text)
    assert n == 1, f"{path}: no computed-plan block"
    path.write_text(new)


def write_block(path: Path, section: str, block: str) -> None:
    """Replace `block` (its first and last lines are its markers) in `path`, or add it to `## section`."""
    lines = block.splitlines()
    update(path, replace_block, section, lines[0], lines[-1], "\n".join(lines[1:-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the recipes' headers and the docs")
    args = ap.parse_args()
    rs = recipes()
    plans = all_plans(rs)
    for name, r in rs.items():
        print(f"{gp.RECIPES[name][0]}:")
        print("\n".join(line for p in gp.recipe_plans(r) for line in gp.header_lines(p)))
    print()
    print(memory_table(plans))
    print()
    print(summary_table(plans))
    if args.write:
        for name, r in rs.items():
            write_header(ROOT / gp.RECIPES[name][0], [line for p in gp.recipe_plans(r) for line in gp.header_lines(p)])
        write_block(PERF, "scale", perf_block(plans, rs))
        write_block(CLUSTER, "Learner workers", cluster_block(plans, rs))  # "## Recipes" follows that section
        print(f"wrote the headers of configs/gpu_*.yaml, {PERF.relative_to(ROOT)} and {CLUSTER.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
