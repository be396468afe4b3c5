"""Trained policies out of a run: one Hugging Face folder per policy, loadable without masdsl.

    export_run("runs/coder_tester/20261129-191500")            # newest checkpoint
    export_run(run_dir, step=2, out="exported", merge=True)     # LoRA adapters merged into full weights

For each policy the checkpoint holds weights of (trained, not frozen), a folder
`<out>/<policy>/` with
- a full policy: `save_pretrained` safetensors (tied weights stay tied), `config.json`,
  `generation_config.json`, the tokenizer and its chat template;
- a LoRA policy: a PEFT adapter (`adapter_config.json`, `adapter_model.safetensors`, whose
  `base_model_name_or_path` is the base folder) plus the tokenizer; with `merge=True` the adapter
  merged into its base, saved as a full policy;
- `README.md`: a model card naming the workflow, the roles the policy played, the step, and the
  evaluation results before and after training (from the checkpoint's state).
Default `out`: `RUN_DIR/export/step_N/`. The models are built as the trainer builds them
(`policies.load_policies` with the checkpoint's configuration, on the CPU), so an export computes
the same log-probs as the checkpoint's policy.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from masdsl.config import ALL_POLICIES, Config, TrainConfig, resolve_config
from masdsl.errors import CheckpointError, UserError
from masdsl.lang import loads
from masdsl.lang.workflow import Workflow
from masdsl.learner.policies import Policy, load_policies
from masdsl.models.load import load_model
from masdsl.plan.placement import plan_placement
from masdsl.plan.run_plan import RunPlan, resolve_rollout
from masdsl.runtime import run_files
from masdsl.runtime.rundir import SOURCE
from masdsl.training import checkpoint as ckpt

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def find_checkpoint(run_dir: str | os.PathLike, step: int | None = None) -> Path:
    """The checkpoint folder of `run_dir` (a run folder or one checkpoint): the newest, or `step`'s."""
    path = ckpt.find(run_dir)
    if step is None or ckpt.read_state(path).step == step:
        return path
    run = path.parent.parent
    wanted = ckpt.checkpoints_dir(run) / ckpt.checkpoint_name(step)
    if not (wanted / "state.json").is_file():
        have = ", ".join(str(ckpt.read_state(p).step) for p in ckpt.list_complete(run)) or "none"
        raise CheckpointError(f"run `{run}` has no complete checkpoint of step {step}; steps with one: {have}")
    return wanted


def run_workflow(run_dir: str | os.PathLike) -> Workflow:
    """The workflow a run trained, from the copies the run folder keeps (`masdsl.runtime.run_files`:
    the source and its imports and data files, hash-checked); a folder of an earlier version: its
    `workflow.mas`."""
    run_dir = Path(run_dir)
    kept = run_files.load(run_dir)
    if kept is not None:
        return kept
    source = run_dir / SOURCE
    if not source.is_file() or not source.read_text().strip():
        raise UserError(f"`{run_dir}` has no {SOURCE}; name the workflow file (masdsl export RUN_DIR --workflow FILE)")
    try:
        return loads(source.read_text(), name=str(source), base_dir=run_dir)
    except UserError as exc:  # e.g. an `import "env.py"` relative to the original file
        raise UserError(f"the workflow kept in {source} does not load here ({str(exc).splitlines()[0]}); "
                        "name the original file: masdsl export RUN_DIR --workflow FILE") from None


def export_run(run_dir: str | os.PathLike, *, workflow: Workflow | None = None, step: int | None = None,
               out: str | os.PathLike | None = None, merge: bool = False) -> dict[str, Path]:
    """Export every trained policy of a run's checkpoint; {policy: folder}."""
    path = find_checkpoint(run_dir, step)
    run = path.parent.parent
    if workflow is None:
        workflow = run_workflow(run)
    state = ckpt.read_state(path, workflow, settings=False)
    out = Path(out) if out is not None else run / "export" / ckpt.checkpoint_name(state.step)
    return export_checkpoint(checkpoint_plan(workflow, path), path, out, merge=merge)


def export_final(plan: RunPlan, run_dir: Path, step: int) -> dict[str, Path]:
    """What a run logs with `tracking.log_models`: its policies at its last checkpoint (`step`),
    merged, into `run_dir/export/step_N/`, rebuilt from the run's own plan (`narrowed`)."""
    path = find_checkpoint(run_dir, step)
    return export_checkpoint(narrowed(plan, path), path, run_dir / "export" / ckpt.checkpoint_name(step), merge=True)


def checkpoint_config(path: Path) -> Config:
    """The configuration a checkpoint was trained with, on the CPU."""
    return resolve_config(None, path / "config.yaml", ["runtime.device=cpu"])


def checkpoint_plan(workflow: Workflow, path: Path) -> RunPlan:
    """The plan a checkpoint's trained policies are rebuilt with: the configuration saved with it
    (`checkpoint_config`), narrowed to those policies (no frozen judge is loaded for nothing). The
    caller checked that `path` is a checkpoint of `workflow` (`checkpoint.read_state`)."""
    return resolve_rollout(*_only(workflow, checkpoint_config(path), _trained(workflow, path)))


def narrowed(plan: RunPlan, path: Path) -> RunPlan:
    """`checkpoint_plan` of a checkpoint saved from `plan`, derived from it instead of planning the
    saved configuration again: the same policies, narrowed the same way, on the CPU."""
    only, cfg = _only(plan.workflow, plan.config, _trained(plan.workflow, path))
    cfg.runtime.device = "cpu"  # as `checkpoint_config`
    specs = {name: plan.policies[name] for name in only.policies}
    return dataclasses.replace(plan, config=cfg, workflow=only, policies=specs,
                               placement=plan_placement(only, specs, cfg.runtime))


def _trained(workflow: Workflow, path: Path) -> list[str]:
    names = [n for n in ckpt.trained_policies(path) if n in workflow.policies]
    if not names:
        raise CheckpointError(f"checkpoint `{path}` holds no trained policy of workflow `{workflow.name}`")
    return names


def export_checkpoint(plan: RunPlan, path: Path, out: Path, *, merge: bool = False) -> dict[str, Path]:
    """Export the policies of one checkpoint folder (`plan`: its `checkpoint_plan`) into `out/<policy>/`."""
    workflow, state = plan.workflow, ckpt.read_state(path)
    policies = load_policies(plan)
    done = {}
    for name in plan.policies:
        p = policies[name]
        p.load_state_dict(ckpt.policy_weights(path, name))
        folder = out / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        if p.adapter is None:
            _save_full(p.model, p.tokenizer, folder)
            kind = "full"
        elif merge:
            with tempfile.TemporaryDirectory() as tmp:
                _save_adapter(p, Path(tmp))
                _merge(p, Path(tmp), folder, plan.runtime.dtype)
            kind = "merged"
        else:
            _save_adapter(p, folder)
            kind = "adapter"
        (folder / "README.md").write_text(model_card(workflow, plan.train, state, p, kind))
        done[name] = folder
    return done


def _only(workflow: Workflow, cfg: Config, names: list[str]) -> tuple[Workflow, Config]:
    """The workflow and configuration narrowed to `names` (no frozen judge is loaded for nothing)."""
    cfg = copy.deepcopy(cfg)
    cfg.policy = {k: v for k, v in (cfg.policy or {}).items() if k in names or k == ALL_POLICIES}
    return dataclasses.replace(workflow, policies={n: workflow.policies[n] for n in names}), cfg


def _save_full(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def _save_adapter(p: Policy, folder: Path) -> None:
    """A PEFT adapter folder of `p`'s adapter alone (the shared `PeftModel` may hold several)."""
    config = copy.deepcopy(p.model.peft_config[p.adapter])
    config.base_model_name_or_path = str(p.model_path)
    config.inference_mode = True
    config.save_pretrained(str(folder))
    ckpt.save_weights(p.state_dict(), folder / "adapter_model.safetensors")
    p.tokenizer.save_pretrained(folder)


def _merge(p: Policy, adapter: Path, folder: Path, dtype: str) -> None:
    """A fresh base with the adapter folder merged in (the shared base stays untouched)."""
    from peft import PeftModel  # heavy: peft only for LoRA policies

    base, tokenizer = load_model(p.model_path, dtype=dtype, device="cpu")
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    _save_full(merged, tokenizer, folder)


def model_card(workflow: Workflow, tc: TrainConfig, state: ckpt.TrainState, p: Policy, kind: str) -> str:
    """The README.md of an exported policy."""
    roles = ", ".join(f"`{r}`" for r in p.roles) or "(none)"
    what = {"full": "full weights (Hugging Face `save_pretrained`, safetensors)",
            "adapter": f"a PEFT LoRA adapter on `{p.model_path}`",
            "merged": "full weights: a LoRA adapter merged into its base"}[kind]
    lines = [
        f"# {workflow.name} · policy `{p.name}`", "",
        workflow.description, "",
        f"Trained with AT-GRPO by masdsl: workflow `{workflow.name}`, roles {roles}, "
        f"{state.step} optimizer steps (`{ckpt.checkpoint_name(state.step)}`).", "",
        f"- base model: `{p.spec.model}`",
        f"- this folder: {what}",
        f"- training: lr {tc.lr}, K = {tc.samples}, batch {tc.batch}, "
        f"grouping `{tc.grouping}`, seed {tc.seed}",
    ]
    if p.spec.chat_template_kwargs:
        lines.append(f"- chat template variables used: `{json.dumps(p.spec.chat_template_kwargs)}`")
    lines += ["", "## Evaluation", "", "Before training (step 0) and after; the run's eval split, "
              f"{tc.eval_samples} episode(s) per task at temperature {tc.eval_temperature}.", "",
              "| step | metric | value |", "|---|---|---|"]
    lines += [f"| {ev.get('step')} | `{k}` | {v:.4f} |" for ev in state.evals for k, v in ev.items()
              if isinstance(v, (int, float)) and _card_metric(k, p.roles)]
    use = (f"masdsl eval WORKFLOW.mas policy.{p.name}.model=THIS_FOLDER" if kind != "adapter" else
           f"python -c 'from peft import AutoPeftModelForCausalLM; AutoPeftModelForCausalLM.from_pretrained(\"THIS_FOLDER\")'")
    return "\n".join([*lines, "", "## Use", "", "```bash", use, "```", ""])


def _card_metric(key: str, roles: list[str]) -> bool:
    """The metrics a model card lists: success, reward, mean@N / pass@k, and the policy's roles' rewards."""
    return key in ("success/eval", "reward/eval") or key.startswith(("mean@", "pass@")) \
        or any(key.startswith(f"eval_reward/{r}/") for r in roles)
