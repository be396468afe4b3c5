"""Per-policy chat-template kwargs and per-role sampling options, from the `.mas` file and the config.

Prompts are rendered by masdsl (`prompts.encode` with the engine's tokenizer) for every engine;
engines receive token ids and a `GenRequest` carrying every `sample { }` option.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from masdsl.config import ConfigError, resolve_config
from masdsl.lang.workflow import PolicySpec
from masdsl.plan.run_plan import role_sample
from masdsl.runtime import prompts
from masdsl.runtime.backends.base import GenRequest
from masdsl.runtime.executor import rollout
from tests.support.rollout_plans import plan_of
from masdsl.testing.tiny import THINKING_CHAT_TEMPLATE
from tests.support.overrides import NO_TRACKING
from tests.support.paths import ADDER_DIR

DATA = ADDER_DIR
MESSAGES = [{"role": "user", "content": "Say a number."}]


@pytest.fixture(scope="module")
def thinking_tok(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = THINKING_CHAT_TEMPLATE
    return tok


class RecordingEngine:
    """An engine that renders nothing itself, like `VLLMEngine`: it keeps the requests it gets."""

    def __init__(self, tokenizer, text="3"):
        self.tokenizer = tokenizer
        self.text = text
        self.requests: list[GenRequest] = []

    def generate(self, requests):
        from masdsl.runtime.backends.base import Candidate

        self.requests += requests
        return [[Candidate([1], self.text, [0.0], "stop") for _ in range(r.n)] for r in requests]

    def close(self):
        pass


def _wf(h, *, chat=None, sample=None):
    wf = h.workflow([h.role("a", sample=sample or {"max_tokens": 24, "temperature": 1.0})],
                    [("start", "a"), ("a", "end")])
    wf.policies["p"] = PolicySpec("p", "tiny", chat_template_kwargs=chat)
    return wf


def _roll(h, wf, engine, cfg, *, mode="eval", samples=1, tasks=("t0", "t1")):
    return rollout(plan_of(wf, cfg, samples=samples), h.CounterEnv(), [{"id": t} for t in tasks], {"p": engine},
                   mode=mode, step=0)


# -- chat_template_kwargs ------------------------------------------------------------------------


def test_enable_thinking_changes_the_rendered_prompt(thinking_tok):
    plain = prompts.encode(thinking_tok, MESSAGES, max_tokens=512)[1]
    off = prompts.encode(thinking_tok, MESSAGES, max_tokens=512, chat_kwargs={"enable_thinking": False})
    on = prompts.encode(thinking_tok, MESSAGES, max_tokens=512, chat_kwargs={"enable_thinking": True})[1]
    assert off[1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert plain == on and "<think>" not in plain
    assert off[0] == prompts.text_ids(thinking_tok, off[1])  # the ids are the rendered text's


def test_chat_template_kwargs_may_not_set_what_masdsl_sets(thinking_tok):
    with pytest.raises(prompts.PromptError, match="may not set `add_generation_prompt`"):
        prompts.encode(thinking_tok, MESSAGES, max_tokens=512, chat_kwargs={"add_generation_prompt": False})


@pytest.mark.parametrize("source", ["file", "config", "both"])
def test_chat_template_kwargs_reach_the_prompt_from_file_and_config(h, thinking_tok, source):
    """The `.mas` block's kwargs, `policy.NAME.chat_template_kwargs.*` overrides (which win)."""
    chat = {"enable_thinking": False} if source == "file" else {"enable_thinking": True} if source == "both" else None
    overrides = [] if source == "file" else ["policy.p.chat_template_kwargs.enable_thinking=false"]
    engine = RecordingEngine(thinking_tok)
    ro = _roll(h, _wf(h, chat=chat), engine, h.config(*overrides))
    assert all(r.prompt_text.endswith("<think>\n\n</think>\n\n") for r in ro.records)
    assert [r.prompt_ids for r in engine.requests] == [prompts.text_ids(thinking_tok, r.prompt_text) for r in ro.records]
    baseline = _roll(h, _wf(h), RecordingEngine(thinking_tok), h.config())
    assert not any("<think>" in r.prompt_text for r in baseline.records)


def test_enable_thinking_reaches_the_hf_engine(h, hf_engine, thinking_tok):
    from masdsl.runtime.backends.hf import HFEngine

    engine = HFEngine(hf_engine.model, thinking_tok, seed=0)
    ro = _roll(h, _wf(h), engine, h.config("policy.p.chat_template_kwargs.enable_thinking=false",
                                         "sample.a.max_tokens=2"))
    assert all("</think>" in r.prompt_text for r in ro.records)
    think_ids = prompts.text_ids(thinking_tok, "<think>\n\n</think>\n\n")
    assert all(r.prompt_ids[-len(think_ids):] == think_ids for r in ro.records)


def test_policy_block_accepts_chat_template_kwargs():
    import masdsl

    text = (DATA / "toy.mas").read_text().replace(
        'policy shared { model: "smollm2-135m-instruct" }',
        'policy shared { model: "smollm2-135m-instruct", chat_template_kwargs: { enable_thinking: false } }')
    wf = masdsl.loads(text, "toy.mas", base_dir=DATA)
    assert wf.policies["shared"].chat_template_kwargs == {"enable_thinking": False}
    assert "chat_template_kwargs" not in wf.policies["shared"].options
    with pytest.raises(Exception, match="chat_template_kwargs"):
        masdsl.loads(text.replace("{ enable_thinking: false }", "true"), "toy.mas", base_dir=DATA)


# -- sample overrides: validation ------------------------------------------------------------------


def test_sample_overrides_are_typed_and_hinted():
    cfg = resolve_config(overrides=["sample.coder.max_tokens=256", "sample.coder.top_k=20", 'sample.coder.stop=["\\n\\n"]'])
    assert (cfg.sample["coder"].max_tokens, cfg.sample["coder"].top_k, cfg.sample["coder"].stop) == (256, 20, ["\n\n"])
    with pytest.raises(ConfigError, match=r"unknown config key `sample.coder.topk` \(did you mean `sample.coder.top_k`\?\)"):
        resolve_config(overrides=["sample.coder.topk=5"])
    with pytest.raises(ConfigError, match="sample.coder.max_tokens"):
        resolve_config(overrides=["sample.coder.max_tokens=lots"])


def test_sample_overrides_from_the_config_file(tmp_path, h):
    path = tmp_path / "c.yaml"
    path.write_text("sample:\n  a:\n    max_tokens: 7\n    min_p: 0.05\n")
    cfg = resolve_config(config_file=path, overrides=["sample.a.max_tokens=9"])  # the command line wins
    wf = _wf(h, sample={"max_tokens": 24, "temperature": 0.5})
    assert role_sample(wf, cfg, "a") == {"max_tokens": 9, "temperature": 0.5, "min_p": 0.05}


def test_unknown_role_is_an_error_before_anything_runs(h, thinking_tok):
    engine = RecordingEngine(thinking_tok)
    with pytest.raises(ConfigError, match=r"`sample.b`: the workflow has no role `b`.*roles: a"):
        _roll(h, _wf(h), engine, h.config("sample.b.max_tokens=3"))
    with pytest.raises(ConfigError, match=r"did you mean `sample.a`"):
        _roll(h, _wf(h), engine, h.config("sample.aa.max_tokens=3"))
    assert engine.requests == []


def test_masdsl_eval_rejects_an_unknown_role_with_a_hint(tmp_path, capsys):
    from masdsl.cli import main

    code = main(["eval", str(DATA / "toy.mas"), "runtime.engine=replay", f"runtime.replay_file={DATA / 'toy_replay.jsonl'}",
                 f"runtime.runs_dir={tmp_path}", NO_TRACKING, "sample.bb.max_tokens=4"])
    assert code == 2
    assert "did you mean `sample.b`" in capsys.readouterr().err


# -- sample options reach the engines ----------------------------------------------------------------


def test_every_sample_option_reaches_the_request(h, thinking_tok):
    from masdsl.lang.check_roles import SAMPLE_KEYS

    engine = RecordingEngine(thinking_tok)
    overrides = ["sample.a.temperature=0.7", "sample.a.top_p=0.9", "sample.a.top_k=5", "sample.a.min_p=0.05",
                 "sample.a.max_tokens=11", 'sample.a.stop=["!"]', "sample.a.seed=3", "sample.a.repetition_penalty=1.3",
                 "sample.a.samples=3"]
    assert {o.split(".")[2].split("=")[0] for o in overrides} == set(SAMPLE_KEYS)  # every accepted key is tested
    _roll(h, _wf(h), engine, h.config(*overrides), mode="train", samples=2)
    r = engine.requests[0]
    assert (r.temperature, r.top_p, r.top_k, r.min_p, r.max_tokens, r.stop, r.repetition_penalty, r.n) == (
        0.7, 0.9, 5, 0.05, 11, ["!"], 1.3, 3)  # the role's own K (samples) over the rollout's 2
    seeds = [q.seed for q in engine.requests]
    other = RecordingEngine(thinking_tok)
    _roll(h, _wf(h), other, h.config(*overrides[:-3], overrides[-1]), mode="train", samples=2)
    assert [q.seed for q in other.requests] != seeds  # the role's seed changes its request seeds


def test_max_tokens_override_caps_the_hf_response(h, hf_engine):
    wf = _wf(h, sample={"max_tokens": 24, "temperature": 1.0})
    long = _roll(h, wf, hf_engine, h.config(), mode="train", samples=2)
    short = _roll(h, wf, hf_engine, h.config("sample.a.max_tokens=3"), mode="train", samples=2)
    assert max(len(r.response_ids) for r in long.records) > 3
    assert all(1 <= len(r.response_ids) <= 3 for r in short.records)


def test_top_k_override_reaches_the_hf_sampler(h, hf_engine):
    """top_k=1 at temperature 1 must pick the argmax: the same tokens as greedy decoding."""
    wf = _wf(h, sample={"max_tokens": 12, "temperature": 1.0})
    greedy = _roll(h, wf, hf_engine, h.config("train.eval_temperature=0"), mode="eval")
    top1 = _roll(h, wf, hf_engine, h.config("sample.a.top_k=1"), mode="train", samples=2)
    hot = _roll(h, wf, hf_engine, h.config("sample.a.temperature=5.0"), mode="train", samples=2)
    want = {r.task_id: r.response_ids for r in greedy.records}
    assert all(r.response_ids == want[r.task_id] for r in top1.records)
    assert any(r.response_ids != want[r.task_id] for r in hot.records)


def test_hf_engine_builds_min_p_and_repetition_penalty(hf_engine, monkeypatch):
    """min_p goes to the GenerationConfig; the penalty runs after the log-prob recorder (raw log-probs)."""
    from transformers import RepetitionPenaltyLogitsProcessor

    seen = {}
    original = hf_engine.model.generate

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(hf_engine.model, "generate", spy)
    ids = prompts.encode(hf_engine.tokenizer, MESSAGES, max_tokens=512)[0]
    plain = hf_engine.generate([GenRequest(ids, temperature=0.0, max_tokens=6)])[0][0]
    out = hf_engine.generate([GenRequest(ids, temperature=1.0, top_k=7, min_p=0.05, repetition_penalty=1.5,
                                         max_tokens=6, seed=1)])[0][0]
    cfg, procs = seen["generation_config"], list(seen["logits_processor"])
    assert (cfg.top_k, cfg.min_p) == (7, 0.05)
    assert type(procs[0]).__name__ == "_LogprobRecorder" and isinstance(procs[1], RepetitionPenaltyLogitsProcessor)
    assert procs[1].penalty == 1.5 and len(out.token_ids) >= 1
    penalised = hf_engine.generate([GenRequest(ids, temperature=0.0, repetition_penalty=1e6, max_tokens=6)])[0][0]
    assert len(set(penalised.token_ids)) == len(penalised.token_ids)  # no token twice under a huge penalty
    assert plain.token_ids != penalised.token_ids or len(set(plain.token_ids)) == len(plain.token_ids)


def test_vllm_sampling_params_carry_every_option():
    from masdsl.runtime.backends.vllm import sampling_params

    kw = sampling_params(GenRequest([1, 2], n=3, temperature=0.8, top_p=0.9, top_k=20, min_p=0.05, max_tokens=5,
                                    stop=["!"], repetition_penalty=1.1), seed=7)
    assert {k: kw[k] for k in ("n", "temperature", "top_p", "top_k", "min_p", "max_tokens", "stop", "seed",
                               "repetition_penalty")} == dict(n=3, temperature=0.8, top_p=0.9, top_k=20, min_p=0.05,
                                                              max_tokens=5, stop=["!"], seed=7, repetition_penalty=1.1)
    vllm = pytest.importorskip("vllm")
    params = vllm.SamplingParams(**kw)
    assert (params.top_k, params.min_p, params.repetition_penalty, params.max_tokens) == (20, 0.05, 1.1, 5)


def test_checker_range_checks_the_new_sample_keys():
    import masdsl
    from masdsl.lang.errors import MasError

    text = (DATA / "toy.mas").read_text()
    for bad, msg in (("min_p: 2", "`min_p` must be in [0, 1]"), ("repetition_penalty: 0", "`repetition_penalty` must be positive"),
                     ("seed: 1.5", "`seed` must be a whole number")):
        with pytest.raises(MasError) as exc:
            masdsl.loads(text.replace("sample { max_tokens: 16 }", f"sample {{ max_tokens: 16, {bad} }}", 1), "toy.mas",
                         base_dir=DATA)
        assert msg in str(exc.value)
