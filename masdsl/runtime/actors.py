"""Where environment steps and engines run: in-process, in threads, or in Ray. Thin wrappers.

A pool maps `fn(env, item)` over items and returns `(True, result)` or `(False, reason)` per
item, retrying a failed item `cfg.runtime.env_retries` times; the executor then stops the
rollout (`StepFailed`) or scores the step 0 (see `executor.rollout`'s `on_env_failure`).
`RemoteEngine` holds an engine inside a Ray actor and forwards calls.

Ray rules learnt on these machines: fractional CPUs for every task and actor (whole CPUs let
two actors take both cores, and later tasks hang with no error), and a timeout on every
`ray.get`.

>>> pool = LocalPool(env=10, workers=1, retries=1)
>>> pool.map(lambda env, x: env // x, [2, 0])
[(True, 5), (False, 'ZeroDivisionError: integer division or modulo by zero')]
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from masdsl.config import RuntimeConfig, SandboxConfig
from masdsl.envs.base import Env
from masdsl.errors import StepFailed
from masdsl.lang.imports import _LOADED
from masdsl.plan.run_plan import RunPlan
from masdsl.runtime.backends import build_engine
from masdsl.runtime.backends.base import Engine, EngineCall, GenRequest, Results, as_engine
from masdsl.startup import start_owned_process

if TYPE_CHECKING:
    from types import ModuleType

    from ray import ObjectRef

Item = TypeVar("Item")  # what one env call works on (an `EnvJob`, a chain of moves)

log = logging.getLogger(__name__)

TASK_CPUS = 0.25  # Ray CPUs per env task
ACTOR_CPUS = 0.25  # Ray CPUs per engine actor
ENGINE_START_TIMEOUT_S = 900.0
ENGINE_CALL_TIMEOUT_S = 3600.0


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


class LocalPool:
    """Env steps in this process; threads when `workers > 1` (sandboxed code runs in
    subprocesses, so threads overlap them)."""

    def __init__(self, env: Env, workers: int = 1, retries: int = 0):
        self.env, self.retries = env, retries
        self._threads = ThreadPoolExecutor(workers) if workers > 1 else None

    def _one(self, fn: Callable[[Env, Item], Any], item: Item) -> tuple[bool, Any]:
        reason = ""
        for _ in range(self.retries + 1):
            try:
                return True, fn(self.env, item)
            except Exception as exc:  # noqa: BLE001 - an env failure is scored, never a crash
                reason = _reason(exc)
        return False, reason

    def map(self, fn: Callable[[Env, Item], Any], items: Sequence[Item]) -> list[tuple[bool, Any]]:
        if self._threads is None or len(items) < 2:
            return [self._one(fn, it) for it in items]
        return list(self._threads.map(lambda it: self._one(fn, it), items))

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True)


def start_ray(plan: RunPlan) -> None:
    """Ray up before anything of `plan` is placed in it: engine actors and env tasks
    (`runtime.ray`) or learner workers (`runtime.learner_workers`); nothing otherwise."""
    if plan.runtime.ray or plan.placement.learner_workers:
        init_ray(plan.runtime)


def init_ray(rt: RuntimeConfig) -> None:
    """Join `runtime.ray_address`, or start Ray locally sized to this machine (idempotent).

    `address="local"` starts a new instance even when another Ray instance runs on the machine
    (plain `ray.init()` would join it, and refuses `num_cpus` when it does)."""
    import ray  # heavy: ray is optional (the train extra); only `runtime.ray` runs need it

    if ray.is_initialized():
        return
    address = rt.ray_address
    if address:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    else:
        ray.init(address="local", num_cpus=os.cpu_count() or 2, include_dashboard=False,
                 ignore_reinit_error=True, log_to_driver=False)


# Custom resources a multi-node cluster advertises (runtime/start_head.sh, start_worker.sh,
# runtime/cluster.yaml): env tasks take one `masdsl_env` slot, an engine actor its GPU share of
# `masdsl_infer` slots. Asked for only when the cluster has them, so one machine needs nothing.
ENV_SLOT, INFER_SLOT = "masdsl_env", "masdsl_infer"
# A learner worker (`runtime.learner_workers`, masdsl/learner/workers.py) takes one `masdsl_learn`
# slot where the cluster offers them (a node's GPUs for training), else it goes anywhere.
LEARN_SLOT = "masdsl_learn"


def slot_resources(name: str, amount: float) -> dict[str, float]:
    """`{name: amount}` when the connected Ray cluster advertises `name`, else `{}`."""
    import ray  # heavy: ray is optional (the train extra); only `runtime.ray` runs need it

    return {name: amount} if ray.cluster_resources().get(name, 0) > 0 else {}


def ship_user_modules() -> None:
    """Pickle objects from the workflow's `import "x.py"` files by value.

    Those files are imported under generated module names that a Ray worker cannot import,
    so an env (or function) defined there would fail to unpickle in every env task. Functions
    that expressions call by name are re-imported in the worker from the file's path.
    """
    from ray import cloudpickle  # heavy: ray is optional (the train extra); only `runtime.ray` runs need it

    for module in list(_LOADED.values()):
        cloudpickle.register_pickle_by_value(module)


def _cancel(ray: ModuleType, ref: ObjectRef) -> None:
    try:
        ray.cancel(ref, force=True)
    except Exception:  # noqa: BLE001 - already finished or gone
        pass


def _call(fn: Callable[[Env, Item], Any], env: Env, item: Item) -> Any:
    return fn(env, item)


class RayPool:
    """Env steps as Ray tasks (fractional CPUs); the env is put in the object store once."""

    def __init__(self, env: Env, retries: int = 0, timeout_s: float = 300.0):
        import ray  # heavy: ray is optional (the train extra); only `runtime.ray` runs need it

        self._ray = ray
        ship_user_modules()
        self.env_ref = ray.put(env)
        self.retries, self.timeout_s = retries, timeout_s
        self._task = ray.remote(num_cpus=TASK_CPUS, max_retries=0, resources=slot_resources(ENV_SLOT, 1.0))(_call)

    def map(self, fn: Callable[[Env, Item], Any], items: Sequence[Item]) -> list[tuple[bool, Any]]:
        ray = self._ray
        results: list[tuple[bool, Any]] = [(False, "not run")] * len(items)
        todo = list(range(len(items)))
        for _ in range(self.retries + 1):
            refs = {i: self._task.remote(fn, self.env_ref, items[i]) for i in todo}
            failed = []
            for i, ref in refs.items():
                try:
                    results[i] = (True, ray.get(ref, timeout=self.timeout_s))
                except Exception as exc:  # noqa: BLE001 - RayTaskError, GetTimeoutError, worker death
                    if isinstance(exc, ray.exceptions.GetTimeoutError):
                        _cancel(ray, ref)
                    results[i] = (False, _reason(getattr(exc, "cause", None) or exc))
                    failed.append(i)
            if not failed:
                break
            todo = failed
        return results

    def close(self) -> None:
        """The Ray instance outlives the pool (one per process)."""


def make_pool(env: Env, rt: RuntimeConfig, sandbox: SandboxConfig, k: int = 1) -> LocalPool | RayPool:
    """The pool `runtime` asks for: Ray tasks when `runtime.ray`, else local threads."""
    retries = int(rt.env_retries)
    if rt.ray:
        init_ray(rt)
        timeout = 60.0 + 4.0 * float(sandbox.timeout_s) * max(1, k)
        return RayPool(env, retries=retries, timeout_s=timeout)
    return LocalPool(env, workers=int(rt.env_workers), retries=retries)


def engine_from_folder(kind: str, model_path: str, kwargs: dict[str, Any], threads: int | None = None) -> Any:
    """Build engine `kind` ("hf" or "vllm") of the model folder `model_path`: the factory that
    `masdsl run` gives a `RemoteEngine`, so the engine loads where the actor runs (and loads again
    there after a restart; the driver then sends the latest weights).

    `threads`: torch's intra-op threads in the actor. Ray starts an actor that asks for under
    one CPU with OMP_NUM_THREADS=1; a CPU engine then generates on one core, and its float
    sums (log-probs) differ in the last bits from the same engine in a driver using all cores.
    """
    if threads:
        import torch  # heavy: torch is optional (the train extra)

        torch.set_num_threads(int(threads))
    return build_engine(kind, model_path, **kwargs)


class _EngineHost:
    """The actor body: builds the engine where it runs and forwards calls to it."""

    def __init__(self, factory: Callable[[], Any]):
        start_owned_process()  # this actor's process is masdsl's: before the engine imports transformers
        self.engine = as_engine(factory())

    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def generate(self, requests: list[GenRequest]) -> Results:
        return self.engine.generate(requests)

    def update_weights(self, state_dict: dict) -> None:
        self.engine.update_weights(state_dict)

    def sleep(self, level: int = 1) -> None:
        self.engine.sleep(level)

    def wake_up(self) -> None:
        self.engine.wake_up()

    def close(self) -> None:
        self.engine.close()


ENGINE_RESTARTS = 3  # times Ray restarts a dead engine actor (its constructor runs again)


class RemoteEngine(Engine):
    """An `Engine` living in a Ray actor: `submit` returns a running call, so the executor's
    batches for several engines overlap.

    Fault tolerance: the actor is created with `max_restarts`; when it dies during a call
    (`RayActorError`: process killed, node lost), Ray rebuilds it from the factory, this class
    loads the latest weights sent by `update_weights` into it again (kept in the object store
    as one reference) and redoes the interrupted call. Requests carry their own seeds, so the
    redone call samples what the lost one would have.
    """

    takes_refs = True  # `update_weights` reads an object-store ref in the actor

    def __init__(self, factory: Callable[[], Any], *, num_cpus: float = ACTOR_CPUS, num_gpus: float = 0.0,
                 call_timeout_s: float = ENGINE_CALL_TIMEOUT_S, max_restarts: int = ENGINE_RESTARTS):
        import ray  # heavy: ray is optional (the train extra); only `runtime.ray` runs need it

        self._ray = ray
        self.call_timeout_s, self.max_restarts = call_timeout_s, max_restarts
        self.restarts = 0  # recoveries so far (for tests and logs)
        self._weights: Any = None  # ObjectRef of the latest weights sent
        slots = slot_resources(INFER_SLOT, min(1.0, num_gpus) if num_gpus > 0 else 0.01)
        host = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, resources=slots,
                          max_restarts=max_restarts, max_task_retries=0)(_EngineHost)
        self.actor = host.remote(factory)
        self.tokenizer = ray.get(self.actor.tokenizer.remote(), timeout=ENGINE_START_TIMEOUT_S)

    def submit(self, requests: list[GenRequest]) -> EngineCall:
        """Start the batch in the actor; the call's `result()` waits for it (redone after a restart)."""
        ref = self.actor.generate.remote(requests)
        return EngineCall(partial(self._wait, requests, ref))

    def collect(self, call: EngineCall) -> Results:
        """The candidates of a call `submit` started (its `result()`)."""
        return call.result()

    def generate(self, requests: list[GenRequest]) -> Results:
        return self.submit(requests).result()

    def _wait(self, requests: list[GenRequest], ref: ObjectRef) -> Results:
        while True:
            try:
                return self._ray.get(ref, timeout=self.call_timeout_s)
            except self._ray.exceptions.RayActorError as exc:
                self._recover(exc)
                ref = self.actor.generate.remote(requests)

    def _recover(self, exc: BaseException) -> None:
        """Wait for Ray to restart the actor, then give it the latest weights again."""
        self.restarts += 1
        if self.restarts > self.max_restarts:
            raise StepFailed(f"the inference engine died {self.restarts} times; last error: {_reason(exc)}",
                             error=_reason(exc)) from None
        log.warning("inference engine actor died (%s); restarting it", _reason(exc))
        deadline = time.monotonic() + ENGINE_START_TIMEOUT_S
        while True:  # calls fail fast (ActorUnavailableError) until the new actor is built
            try:
                self._ray.get(self.actor.tokenizer.remote(), timeout=ENGINE_START_TIMEOUT_S)
                break
            except self._ray.exceptions.RayActorError as again:
                if time.monotonic() > deadline:
                    raise StepFailed(f"the inference engine did not come back after dying: {_reason(again)}",
                                     error=_reason(again)) from None
                time.sleep(0.5)
        if self._weights is not None:
            self._ray.get(self.actor.update_weights.remote(self._weights), timeout=self.call_timeout_s)

    def update_weights(self, state_dict: dict[str, Any] | ObjectRef) -> None:
        """Load new weights: a state dict, or an object-store ref of one (put by a learner worker,
        owned by the driver), which the actor reads without a copy through the driver."""
        self._weights = state_dict if isinstance(state_dict, self._ray.ObjectRef) else self._ray.put(state_dict)
        try:
            self._ray.get(self.actor.update_weights.remote(self._weights), timeout=self.call_timeout_s)
        except self._ray.exceptions.RayActorError as exc:
            self._recover(exc)  # loads self._weights into the restarted actor

    def sleep(self, level: int = 1) -> None:
        """Free the engine's GPU memory until `wake_up` (vLLM's sleep mode; else nothing).

        A dead actor is left to the next `update_weights` or `generate`, which restart it (awake)."""
        self._sleep_call(self.actor.sleep.remote(level))

    def wake_up(self) -> None:
        """Take back the memory `sleep` freed."""
        self._sleep_call(self.actor.wake_up.remote())

    def _sleep_call(self, ref: ObjectRef) -> None:
        try:
            self._ray.get(ref, timeout=self.call_timeout_s)
        except self._ray.exceptions.RayActorError as exc:
            log.warning("inference engine actor is down (%s); the next call restarts it", _reason(exc))

    def close(self) -> None:
        self._weights = None
        try:
            self._ray.get(self.actor.close.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - already dead: nothing to close
            pass
        finally:
            self._ray.kill(self.actor, no_restart=True)
