"""FSDP with one unit per decoder layer (`FsdpShard`), run in 2 gloo processes without Ray.

Each rank runs `update_policy` on its rows, the two ranks' micro-batch counts differ, some
micro-batches have one-token responses (the shared-prompt forward's second call is then made at
weight 0), and the last mini-batch has one row (rank 1 stands in). The update must equal the one
process's update on all rows, and during every layer's forward and backward the other layers'
parameters must be sharded: each rank holds its 1/2 of them, not the whole layer.
"""

from __future__ import annotations

import random
import socket
import threading
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp

from masdsl.config import resolve_config
from masdsl.runtime.records import StepRecord

WORLD = 2
OVERRIDES = ["train.micro_batch_tokens=40", "train.mini_batch_size=6", "train.ppo_epochs=2",
             "train.old_logprobs=trainer", "train.lr=0.001"]


def batch():
    """13 rows in 4 prompt groups (one whose responses are one token long), and their advantages."""
    rng = random.Random(5)
    recs, adv = [], []
    for g in range(4):
        prompt = [rng.randrange(5, 500) for _ in range(rng.randrange(3, 9))]
        for _ in range(4 if g < 3 else 1):
            resp = [rng.randrange(5, 500) for _ in range(1 if g == 1 else rng.randrange(2, 7))]
            recs.append(StepRecord(step=0, episode=0, task_id="t", role="rs"[g % 2], turn=0, node="r", candidate=0,
                                   selected=True, policy="p", prompt_ids=prompt, response_ids=resp,
                                   logprobs=[float("nan")] * len(resp), reward=0.0, reward_team=0.0,
                                   reward_local=0.0, finish_reason="stop", parse_ok=True))
            adv.append(rng.choice([-1.0, -0.5, 0.5, 1.0]))
    return recs, adv


def update(model_dir, shard=None, probe=None):
    """One `update_policy` on `batch()`; returns the model, whole weights and stats."""
    from masdsl.learner.parallel import ONE_PROCESS
    from masdsl.learner.update import update_policy
    from masdsl.learner.workers import build_optimizer
    from masdsl.models.load import load_model

    model, tok = load_model(model_dir)
    if shard is not None:
        model = shard.wrap(model)
    if probe is not None:
        probe(model)
    policy = SimpleNamespace(name="p", model=model, tokenizer=tok, lock=threading.Lock(), activate=lambda: None,
                             parameters=lambda: list(model.parameters()), compute_dtype="float32")
    tc = resolve_config(overrides=OVERRIDES).train
    recs, adv = batch()
    stats = update_policy(policy, build_optimizer(policy.parameters(), tc), recs, adv, tc, shard=shard or ONE_PROCESS)
    weights = shard.full_weights(model) if shard is not None else {k: v.clone() for k, v in model.state_dict().items()}
    return weights, stats


class Probe:
    """At every decoder layer's forward and backward: how many parameter elements are gathered
    (plain tensors, not DTensor shards) in the whole model, and whether each other layer's
    parameters are this rank's shards."""

    def __init__(self, world: int):
        self.world, self.seen, self.gathered, self.bad = world, 0, [], []

    def __call__(self, model):
        from masdsl.learner.parallel import decoder_layers

        self.model, self.layers = model, decoder_layers(model)
        for i, layer in enumerate(self.layers):
            layer.register_forward_pre_hook(lambda m, a, i=i: self.look(i, "forward"))
            layer.register_forward_hook(lambda m, a, out, i=i: self.on_output(i, out))

    def on_output(self, i, out):
        hidden = out[0] if isinstance(out, tuple) else out
        if torch.is_grad_enabled() and hidden.requires_grad:
            hidden.register_hook(lambda g: self.look(i, "backward"))

    def look(self, i, when):
        from torch.distributed.tensor import DTensor

        self.seen += 1
        self.gathered.append(sum(p.numel() for p in self.model.parameters() if not isinstance(p, DTensor)))
        for j, layer in enumerate(self.layers):
            if j == i or (when == "backward" and j == i - 1):  # running, or prefetched for the next backward
                continue
            for name, p in layer.named_parameters():
                whole = p.numel()
                local = p.to_local().numel() if isinstance(p, DTensor) else whole
                if local > -(-p.shape[0] // self.world) * (whole // p.shape[0]):
                    self.bad.append((when, i, j, name, local, whole))


def result_file(out, case: str, fsdp: bool, rank: int) -> str:
    return f"{out}/{case}_{'fsdp' if fsdp else 'ddp'}{rank}.pt"


def rank_main(rank, port, model_dirs, out):
    """One rank: the FSDP update, then the data-parallel one, on each model in `model_dirs`
    (one process pair for every case: each spawned rank pays torch's and transformers' imports)."""
    import torch.distributed as dist

    from masdsl.learner.parallel import FsdpShard, Shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    for case, model_dir in model_dirs.items():
        for fsdp in (True, False):
            probe = Probe(WORLD) if fsdp else None
            weights, stats = update(model_dir, (FsdpShard if fsdp else Shard)(rank, WORLD), probe)
            total = sum(p.numel() for p in probe.model.parameters()) if fsdp else 0  # DTensor: the whole size
            torch.save({"weights": weights, "grad_norm": stats.grad_norm, "steps": stats.optimizer_steps,
                        "loss": stats.loss, "entropy": stats.entropy, "kl_old": stats.kl_old,
                        "role_clip": stats.role_clip_frac,
                        **({"seen": probe.seen, "bad": probe.bad, "peak": max(probe.gathered), "total": total,
                            "layer": sum(p.numel() for p in probe.layers[0].parameters())} if fsdp else {})},
                       result_file(out, case, fsdp, rank))
    dist.destroy_process_group()


def ranks(model_dirs: dict[str, str], out) -> dict[tuple[str, bool], list[dict]]:
    """Run `rank_main` in WORLD spawned processes; {(case, fsdp): each rank's result}."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=rank_main, args=(r, port, model_dirs, str(out))) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=480)
        if p.exitcode is None:
            p.kill()
    assert [p.exitcode for p in procs] == [0] * WORLD, "a rank failed or hung (collectives out of step?)"
    return {(case, fsdp): [torch.load(result_file(out, case, fsdp, r), weights_only=False) for r in range(WORLD)]
            for case in model_dirs for fsdp in (True, False)}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The 4-layer tiny model untied and tied, and both ranks' FSDP and data-parallel results on each."""
    from masdsl.testing import build_tiny_model

    root = tmp_path_factory.mktemp("fsdp_layers")
    dirs = {case: str(build_tiny_model(root / case, seed=0, layers=4, tie_word_embeddings=case == "tied"))
            for case in ("untied", "tied")}
    return dirs, ranks(dirs, root)


def rel_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    num = sum(float((a[k] - b[k]).norm()) ** 2 for k in b) ** 0.5
    return num / sum(float(v.norm()) ** 2 for v in b.values()) ** 0.5


@pytest.mark.parametrize("case", ["untied", "tied"])
def test_per_layer_fsdp_equals_data_parallel_and_keeps_other_layers_sharded(models, case, one_thread):
    """6 optimizer steps (3 mini-batches, 2 epochs): FSDP equals data parallel to ~1e-7 of the
    weights' norm; both differ from one process by ~1.6e-6 (AdamW's sign-like first steps turn
    the other order of float additions into that much)."""
    dirs, results = models
    fsdp, ddp = results[case, True], results[case, False]
    one, one_stats = update(dirs[case])
    for g in fsdp:
        rel, rel_one = rel_diff(g["weights"], ddp[0]["weights"]), rel_diff(g["weights"], one)
        print(f"per-layer FSDP ({case}): ||dw|| / ||w|| = {rel:.2e} vs data parallel, {rel_one:.2e} vs one "
              f"process; peak gathered {g['peak']} of {g['total']} parameters (one layer {g['layer']})")
        assert rel <= 1e-6 and rel_one <= 5e-6
        assert g["steps"] == one_stats.optimizer_steps == 6
        assert g["grad_norm"] == pytest.approx(ddp[0]["grad_norm"], rel=1e-5)
        assert g["loss"] == pytest.approx(ddp[0]["loss"], rel=1e-5, abs=1e-8)
        # what the update measures, summed over the ranks: the rows of both, each once
        assert g["entropy"] == pytest.approx(one_stats.entropy, rel=1e-5) and g["entropy"] > 0
        assert g["kl_old"] == pytest.approx(one_stats.kl_old, rel=1e-3) and g["kl_old"] > 0
        assert g["role_clip"] == pytest.approx(one_stats.role_clip_frac, abs=1e-9) and set(g["role_clip"]) == {"r", "s"}
        assert g["seen"] > 0 and g["bad"] == []
        assert g["peak"] < g["total"] - 2 * g["layer"]  # never more than 2 of the 4 layers gathered
