"""How the ranks of a learner group share one update: data parallel (`Shard`) or FSDP2 (`FsdpShard`).

`masdsl.learner.update.update_policy(..., shard=s)` calls, for each optimizer step:

    s.rows(run)                      this rank's rows of the mini-batch
    s.forward(plan, run)             the micro-batches this rank runs, each through `run`; yields its own,
                                     runs the stand-ins that keep FSDP's ranks in step itself (weight 0)
    s.reduce(params, totals)         after the last backward: gradients (DDP) and loss statistics summed
    s.clip(params, max_norm)         the grad-norm clip of the summed gradient; returns the norm

`ONE_PROCESS` (`Shard(0, 1)`) is the driver training alone: all the rows, no collective, so the
update reads as plain PPO whoever runs it; everything ranks must agree on lives here.

and the learner worker (`masdsl.learner.workers`) uses `wrap`, `full_weights`, `full_optimizer_state`,
`load_optimizer_state` and `load_weights`, which are collectives under FSDP (every rank calls them).

`Shard` (data parallel): every rank holds the whole model and AdamW state; gradients are summed
with `all_reduce` before the clip. `FsdpShard` (`runtime.learner_fsdp`): FSDP2 (`fully_shard`) with
one unit per decoder layer (`model.model.layers[i]`) and a root unit for the rest (embeddings,
final norm, LM head, so tied embeddings stay one parameter): weights, gradients and AdamW state
are sharded over the ranks at rest, and during a forward or backward only the layer being run
is gathered (plus the root and FSDP's one-layer prefetch); each layer's gradient is
reduce-scattered by every micro-batch's backward and summed into the sharded gradient, so no
rank ever holds a whole unsharded gradient. Every rank must then make the same collectives, so
it runs in `lockstep`: the same number of micro-batches per optimizer step (the most any rank
has; the others add stand-in micro-batches at weight 0), each with the same forward calls (the
shared-prompt forward always makes its two calls, `shared_prefix_logprobs(two_calls=True)`),
and a rank without rows in a mini-batch runs the mini-batch's first row at weight 0 (`stand_ins`).
The reduction is a sum (`set_gradient_divide_factor(1.0)` on every unit: the token mean divides
by the whole mini-batch's tokens; gloo has no PREMUL_SUM, so it is forced to a plain sum).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor


@dataclass
class Shard:
    """One rank's part of a data-parallel update (every rank holds the whole model).

    >>> Shard(1, 2).rows([10, 11, 12, 13, 14]), Shard(0, 2).rows([10, 11, 12, 13, 14]), Shard(0, 2).rows([7])
    ([12, 13, 14], [10, 11], [])
    """

    rank: int
    world: int
    stand_ins: set[int] = field(default_factory=set)  # rows this rank runs at weight 0 (FSDP only)
    two_calls = False  # the shared-prompt forward may skip its second call (`shared_prefix_logprobs`)

    def rows(self, run: Sequence[int]) -> list[int]:
        """This rank's contiguous slice of a mini-batch's rows (the K candidates mostly stay together)."""
        n = len(run)
        return list(run[self.rank * n // self.world : (self.rank + 1) * n // self.world])

    def wrap(self, model: nn.Module) -> nn.Module:
        return model

    def micro_batch_plan(self, plan: list) -> tuple[list, int]:
        """The micro-batches this rank runs in one pass over its rows, and how many of them are its
        own (the rest are stand-ins): data parallel ranks run their own and no more."""
        return plan, len(plan)

    def is_stand_in(self, k: int, real: int, rows: Sequence[int]) -> bool:
        """Whether micro-batch `k` (of rows `rows`) runs at weight 0, only to keep the ranks in step."""
        return k >= real

    def forward(self, plan: list, run: Callable[[Any], tuple[list[int], torch.Tensor, torch.Tensor]]
                ) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
        """Run this rank's micro-batches of `plan` through `run` (-> rows, log-probs, mask), yielding
        its own. A stand-in (`micro_batch_plan`, `is_stand_in`) runs here, with a backward at weight 0
        where gradients are on, and is not yielded: the caller's PPO step sees only real rows.

        >>> out = Shard(0, 1).forward([[[0]], [[1]]], lambda mb: ([mb[0][0]], torch.zeros(1, 1), torch.ones(1, 1)))
        >>> [rows for rows, _, _ in out]
        [[0], [1]]
        """
        plan, real = self.micro_batch_plan(plan)
        for k, micro_batch in enumerate(plan):
            rows, logp, mask = run(micro_batch)
            if self.is_stand_in(k, real, rows):
                if torch.is_grad_enabled():  # its gathers and reduce-scatters, contributing nothing
                    (logp.sum() * 0.0).backward()
                continue
            yield rows, logp, mask

    def reduce(self, params: Sequence[torch.Tensor], totals: dict[str, float]) -> None:
        """Sum gradients and loss statistics over the ranks (in place). A parameter no rank has a
        gradient for stays without one, as in a single process (AdamW then skips it)."""
        if self.world == 1:
            return
        params = list(params)
        has = torch.tensor([float(p.grad is not None) for p in params] + [totals[k] for k in sorted(totals)],
                           dtype=torch.float64, device=params[0].device)
        dist.all_reduce(has)
        for k, v in zip(sorted(totals), has[len(params):].tolist()):
            totals[k] = v
        grads = []
        for p, flag in zip(params, has[: len(params)].tolist()):
            if flag > 0:
                if p.grad is None:  # this rank's rows did not reach it (or it had no rows)
                    p.grad = torch.zeros_like(p)
                grads.append(p.grad)
        works = [dist.all_reduce(g, async_op=True) for g in grads]
        for w in works:
            w.wait()

    def clip(self, params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(list(params), max_norm)

    def max(self, value: float) -> float:
        """The largest `value` over the ranks; nan where every rank had nan (nothing measured)."""
        if self.world == 1:
            return value
        t = torch.tensor([value if value == value else -1.0], dtype=torch.float64)
        if dist.get_backend() == "nccl":
            t = t.cuda()
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out = float(t.item())
        return out if out >= 0 else float("nan")

    def full_weights(self, model: nn.Module) -> dict[str, Any]:
        """The whole state dict on the CPU (tied weights stay one tensor)."""
        return cpu_copy(model.state_dict())

    def full_optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return cpu_copy(optimizer.state_dict())

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
        optimizer.load_state_dict(dict(state))

    def load_weights(self, model: nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
        model.load_state_dict(weights)


ONE_PROCESS = Shard(0, 1)  # the driver alone: every row, no collective


@dataclass
class FsdpShard(Shard):
    """One rank of an FSDP2 group (`runtime.learner_fsdp`); see the module docstring."""

    two_calls = True  # both calls always: every rank makes the same per-layer collectives

    def rows(self, run: Sequence[int]) -> list[int]:
        """This rank's slice, or when it is empty the mini-batch's first row as a stand-in at weight 0."""
        mine = super().rows(run)
        if mine or not run:
            return mine
        self.stand_ins.add(run[0])
        return [run[0]]

    def wrap(self, model: nn.Module) -> nn.Module:
        """One FSDP unit per decoder layer, then the root (the rest); sum reduction on each."""
        units = [*decoder_layers(model), model]
        for unit in units:  # the layers first: the root's unit takes what no layer took
            fully_shard(unit)  # reshard after forward: only the running layer stays gathered
        for sharded in (cast(FSDPModule, u) for u in units):  # each one now (these setters do not recurse)
            sharded.set_gradient_divide_factor(1.0)  # a sum over the ranks, not their mean
            sharded.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
        return model

    def micro_batch_plan(self, plan: list) -> tuple[list, int]:
        """Every rank runs as many micro-batches as the rank with the most: the others repeat their
        first row as stand-ins at weight 0."""
        n = int(self.max(float(len(plan))))
        return plan + [[[0]]] * (n - len(plan)), len(plan)

    def is_stand_in(self, k: int, real: int, rows: Sequence[int]) -> bool:
        return k >= real or rows[0] in self.stand_ins

    def reduce(self, params: Sequence[torch.Tensor], totals: dict[str, float]) -> None:
        """The gradients were reduce-scattered by each backward; sum the loss statistics."""
        t = torch.tensor([totals[k] for k in sorted(totals)], dtype=torch.float64,
                         device="cuda" if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(t)
        totals.update(zip(sorted(totals), t.tolist()))

    def clip(self, params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
        """The norm over every rank's gradient shards, then each shard scaled by the same factor."""
        params = list(params)
        norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None], 2.0)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
        return norm

    def full_weights(self, model: nn.Module) -> dict[str, Any]:
        """The whole state dict gathered (every rank calls this; tied weights gathered once)."""
        done: dict[int, Any] = {}
        out = {}
        for k, v in model.state_dict().items():
            if id(v) not in done:  # same order on every rank: each gather is matched
                done[id(v)] = _full(v).detach().to("cpu", copy=True)
            out[k] = done[id(v)]
        return out

    def full_optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """AdamW's state with every shard gathered: the layout of one process's optimizer (its
        parameters in the same order), so checkpoints move between FSDP, DDP and the driver."""
        sd = optimizer.state_dict()
        state = {i: {k: _full(v).detach().to("cpu", copy=True) if torch.is_tensor(v) else copy.deepcopy(v)
                     for k, v in sorted(sd["state"][i].items())} for i in sorted(sd["state"])}
        return {"state": state, "param_groups": copy.deepcopy(sd["param_groups"])}

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
        """Load a full AdamW state: each rank keeps its shard of every moment (local slicing)."""
        params = [p for g in optimizer.param_groups for p in g["params"]]
        sharded = {i: {k: _shard_like(v, params[int(i)]) for k, v in s.items()} for i, s in state["state"].items()}
        optimizer.load_state_dict({"state": sharded, "param_groups": state["param_groups"]})

    def load_weights(self, model: nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name, cur in model.state_dict(keep_vars=True).items():
                cur.copy_(_shard_like(weights[name].to(cur.dtype), cur))


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of a transformers causal LM (`model.model.layers`); none for another model."""
    return list(getattr(getattr(model, "model", None), "layers", None) or [])


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _shard_like(value: object, param: torch.Tensor) -> Any:
    """`value` (a full tensor) cut like `param` when that is a sharded DTensor of the same shape."""
    if isinstance(param, DTensor) and torch.is_tensor(value) and tuple(value.shape) == tuple(param.shape):
        mesh, placements = param.device_mesh, param.placements
        cut = distribute_tensor(value.to(mesh.device_type), mesh, placements,
                                src_data_rank=None)  # every rank has the full value: slice, no communication
        return DTensor.from_local(cut.to_local().clone(), mesh, placements, run_check=False,  # own memory, not
                                  shape=param.shape, stride=param.stride())  # a view into `value`
    return value


def cpu_copy(obj: object) -> Any:
    """A deep copy of a (nested) state dict with every tensor on the CPU (tensors that share
    memory, such as tied embeddings, stay one tensor)."""
    done: dict[tuple, Any] = {}

    def copy_of(x: object) -> Any:
        if isinstance(x, torch.Tensor):
            key = (x.untyped_storage().data_ptr(), x.storage_offset(), tuple(x.shape), x.dtype) if x.numel() else (id(x),)
            if key not in done:
                done[key] = x.detach().to("cpu", copy=True)
            return done[key]
        if isinstance(x, dict):
            return {k: copy_of(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(copy_of(v) for v in x)
        return copy.deepcopy(x)

    return copy_of(obj)
