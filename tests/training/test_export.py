"""Trained policies leave the run: `masdsl export` and `masdsl eval --checkpoint` after tiny-model runs.

Round trips: an export loaded with plain transformers (peft for an adapter) computes the same
log-probs on a fixed prompt as the checkpoint's policy built the trainer's way; `masdsl eval
--checkpoint RUN` gives the same records as `masdsl eval policy.shared.model=EXPORT`. That the
vllm engine loads an export is tested in tests/runtime/backends/test_vllm_tied.py (on the one engine that
module starts anyway; its run is the `full_run` here: `train_one_step` of `dense_toy_file` on a tied model).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import masdsl
from masdsl.cli import main
from masdsl.learner.policies import load_policies
from masdsl.plan.run_plan import resolve_rollout
from masdsl.runtime.records import read_records
from masdsl.testing import build_tiny_model
from masdsl.training import checkpoint
from masdsl.training.export import checkpoint_config, export_run
from tests.support.exports import dense_toy_file, logprobs, prompt_ids, run_args, train_one_step
from tests.support.toy import TOY_LORA

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/learner/conftest.py


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("full")
    tied = build_tiny_model(tmp / "tied", seed=1, tie_word_embeddings=True)  # SmolLM2 ties embed / lm_head
    mas = dense_toy_file(tmp, "toy_digits.mas")
    return mas, train_one_step(mas, tmp, [f"policy.shared.model={tied}"]), tied


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("lora")
    mas = dense_toy_file(tmp, "toy_digits_lora.mas")
    return mas, train_one_step(mas, tmp, [f"policy.namer_p.model={tiny_model_dir}", f"policy.copier_p.model={tiny_model_dir}"])


def _checkpoint_policy(mas: Path, run_dir: Path, name: str):
    """The policy as the trainer builds it, with the checkpoint's weights."""
    wf, ck = masdsl.load(mas), checkpoint.latest(run_dir)
    p = load_policies(resolve_rollout(wf, checkpoint_config(ck)))[name]
    p.load_state_dict(checkpoint.policy_weights(ck, name))
    p.activate()
    return p


def test_export_full_policy_round_trip(full_run, capsys):
    mas, run_dir, base = full_run
    assert (checkpoint.latest(run_dir) / "policies" / "shared.safetensors").is_file()
    assert main(["export", str(run_dir)]) == 0  # the workflow from the run folder's workflow.mas
    folder = run_dir / "export" / "step_000001" / "shared"
    assert f"policy shared -> {folder}" in capsys.readouterr().out
    assert {"config.json", "model.safetensors", "generation_config.json", "README.md"} <= {f.name for f in folder.iterdir()}
    tok = AutoTokenizer.from_pretrained(folder)
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    exported = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert exported.config.tie_word_embeddings
    assert exported.lm_head.weight.data_ptr() == exported.model.embed_tokens.weight.data_ptr()  # still tied
    ids = prompt_ids(tok)
    policy = _checkpoint_policy(mas, run_dir, "shared")
    ours, theirs = logprobs(policy.model, ids), logprobs(exported, ids)
    assert torch.allclose(ours, theirs, atol=1e-6, rtol=0), (ours - theirs).abs().max()
    before = logprobs(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), ids)
    assert (before - theirs).abs().max() > 1e-4  # the run trained: not the base weights
    card = (folder / "README.md").read_text()
    assert "# toy_digits · policy `shared`" in card and "roles `namer`, `copier`" in card
    assert "1 optimizer steps" in card and "| 0 | `success/eval` |" in card and "| 1 | `success/eval` |" in card


def test_export_lora_adapter_and_merged(lora_run, tiny_model_dir, tmp_path):
    from peft import PeftModel

    mas, run_dir = lora_run
    wf = masdsl.load(mas)
    out = export_run(run_dir, workflow=wf, out=tmp_path / "adapters")
    assert set(out) == {"namer_p", "copier_p"}
    folder = out["namer_p"]
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md"} <= {f.name for f in folder.iterdir()}
    config = json.loads((folder / "adapter_config.json").read_text())
    assert Path(config["base_model_name_or_path"]) == Path(tiny_model_dir).resolve() and config["r"] == 4
    tok = AutoTokenizer.from_pretrained(folder)
    ids = prompt_ids(tok)
    ours = logprobs(_checkpoint_policy(mas, run_dir, "namer_p").model, ids)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    plain = logprobs(base, ids)
    adapter = logprobs(PeftModel.from_pretrained(base, str(folder)), ids)
    assert torch.allclose(ours, adapter, atol=1e-6, rtol=0), (ours - adapter).abs().max()
    assert (plain - adapter).abs().max() > 1e-5  # the adapter trained (B starts at 0)
    merged = export_run(run_dir, workflow=wf, out=tmp_path / "merged", merge=True)["namer_p"]
    assert (merged / "model.safetensors").is_file() and not (merged / "adapter_config.json").exists()
    full = logprobs(AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32), ids)
    assert torch.allclose(ours, full, atol=1e-5, rtol=0), (ours - full).abs().max()


def _eval_records(mas: Path, tmp: Path, capsys, *extra: str) -> tuple[dict, list]:
    capsys.readouterr()
    assert main(["eval", str(mas), *run_args(tmp), "--json", *extra]) == 0
    result = json.loads(capsys.readouterr().out)
    recs = [(r.task_id, r.role, r.response_ids, r.logprobs, r.reward) for r in read_records(Path(result["run_dir"]) / "records.jsonl")]
    return result, recs


def test_eval_checkpoint_equals_eval_of_the_export(full_run, tmp_path, capsys):
    mas, run_dir, base = full_run
    folder = export_run(run_dir)["shared"]
    by_ckpt, recs_ckpt = _eval_records(mas, tmp_path, capsys, f"policy.shared.model={base}", "--checkpoint", str(run_dir))
    by_export, recs_export = _eval_records(mas, tmp_path, capsys, f"policy.shared.model={folder}")
    _, recs_base = _eval_records(mas, tmp_path, capsys, f"policy.shared.model={base}")
    assert by_ckpt["checkpoint"] == str(checkpoint.latest(run_dir)) and by_export["checkpoint"] is None
    assert recs_ckpt == recs_export and len(recs_ckpt) == 2 * 2  # tasks * roles
    assert [r[3] for r in recs_ckpt] != [r[3] for r in recs_base]  # trained weights, not the base
    timing = ("wall_s", "gen_s", "env_s", "tokens_per_s")
    assert {k: v for k, v in by_ckpt["metrics"].items() if k not in timing} == \
        {k: v for k, v in by_export["metrics"].items() if k not in timing}
    assert "success/eval" in by_ckpt["metrics"]


@pytest.mark.parametrize("argv, message", [
    (["export", "/nonexistent/run"], "is not a run folder"),
    (["export", "RUN", "--step", "7"], "no complete checkpoint of step 7; steps with one: 1"),
    (["eval", "MAS", "--checkpoint", "/nonexistent/run"], "is not a run folder"),
])
def test_bad_input_exits_2(full_run, argv, message, capsys):
    mas, run_dir, _ = full_run
    argv = [str(run_dir) if a == "RUN" else str(mas) if a == "MAS" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_export_needs_the_workflow_when_its_copy_does_not_load(lora_run, tmp_path, capsys):
    """A run folder of an earlier version kept only `workflow.mas` (no `files.json` with the files
    it imports): an `import "toy_env.py"` relative to it does not load, and the message says what to do."""
    _, run_dir = lora_run
    (run_dir / "workflow.mas").write_text(TOY_LORA.read_text())  # a relative import
    (run_dir / "files.json").rename(run_dir / "files.json.hidden")
    try:
        assert main(["export", str(run_dir), "--out", str(tmp_path)]) == 2
        assert "--workflow FILE" in capsys.readouterr().err
        assert main(["export", str(run_dir), "--out", str(tmp_path), "--workflow", str(lora_run[0])]) == 0
        assert (tmp_path / "copier_p" / "adapter_model.safetensors").is_file()
    finally:
        (run_dir / "files.json.hidden").rename(run_dir / "files.json")
    assert main(["export", str(run_dir), "--out", str(tmp_path / "own")]) == 0  # this version's folder: alone
    assert (tmp_path / "own" / "copier_p" / "adapter_model.safetensors").is_file()
