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
(`policies.load_policies` with the checkpoint's plan: its saved configuration, on the CPU, only
its trained policies), so an export computes the same log-probs as the checkpoint's policy.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from masdsl.config import TrainConfig
from masdsl.lang.workflow import Workflow
from masdsl.learner.policies import Policy, load_policies
from masdsl.models.load import load_model
from masdsl.plan.run_plan import RunPlan, resolve_rollout
from masdsl.training import checkpoint as ckpt
from masdsl.training.checkpoint_folder import (PlannedCheckpoint, checkpoint_config, checkpoint_of, find_checkpoint,
                                               run_workflow, trained_of)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def export_run(run_dir: str | os.PathLike, *, workflow: Workflow | None = None, step: int | None = None,
               out: str | os.PathLike | None = None, merge: bool = False) -> dict[str, Path]:
    """Export every trained policy of a run's checkpoint (the Python API; `masdsl export` plans in
    its light half and calls `export_checkpoint`); {policy: folder}."""
    if workflow is None:
        workflow = run_workflow(find_checkpoint(run_dir, step).parent.parent)
    path = checkpoint_of(workflow, run_dir, step)
    plan = resolve_rollout(workflow, checkpoint_config(path)).with_policies(trained_of(workflow, path))
    return export_checkpoint(PlannedCheckpoint(path, plan), out, merge=merge)


def export_final(plan: RunPlan, run_dir: Path, step: int) -> dict[str, Path]:
    """What a run logs with `tracking.log_models`: its policies at its last checkpoint (`step`),
    merged, into `run_dir/export/step_N/`, derived from the run's own plan as a checkpoint's
    configuration is planned (`with_policies`: its trained policies, on the CPU), not planned again."""
    path = find_checkpoint(run_dir, step)
    trained = plan.with_policies(trained_of(plan.workflow, path), device="cpu")
    return export_checkpoint(PlannedCheckpoint(path, trained), None, merge=True)


def export_checkpoint(checkpoint: PlannedCheckpoint, out: str | os.PathLike | None = None, *,
                      merge: bool = False) -> dict[str, Path]:
    """Export the policies of one checkpoint folder, as its plan names them, into `out/<policy>/`
    (default `RUN_DIR/export/step_N/`)."""
    plan, path = checkpoint.plan, checkpoint.path
    workflow, state = plan.workflow, ckpt.read_state(path)
    out = Path(out) if out is not None else path.parent.parent / "export" / ckpt.checkpoint_name(state.step)
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
