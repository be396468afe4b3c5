"""Did-you-mean that knows the ecosystem (issue 31, item 4): an unknown config key that is TRL's,
verl's or OpenRLHF's name for a masdsl key gets that key as its hint, before spelling distance
is asked, in overrides, `--config` files and the `.mas` file's `train { }` block."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from masdsl import cli
from masdsl.config import ConfigError, resolve_config
from masdsl.config_aliases import aliases, ecosystem_hint, schema_keys
from masdsl.config_schema import NAMED_SECTIONS, Config

ROOT = Path(__file__).parents[1]
SUDOKU = ROOT / "workflows" / "sudoku.mas"


def refused(*overrides: str, **kw) -> str:
    with pytest.raises(ConfigError) as err:
        resolve_config(overrides=list(overrides), **kw)
    return str(err.value)


@pytest.mark.parametrize("override, says", [  # the three wrong hints, and the brief's names
    ("train.learning_rate=1e-5", "unknown config key `train.learning_rate` (TRL's name; masdsl calls it `train.lr`)"),
    ("train.beta=0.1", "unknown config key `train.beta` (TRL's name; masdsl calls it `train.kl_coef`)"),
    ("train.num_generations=8", "unknown config key `train.num_generations` (TRL's name; masdsl calls it `train.samples`)"),
    ("train.max_steps=5", "(TRL's name; masdsl calls it `train.steps`)"),
    ("train.epsilon=0.2", "(TRL's name; masdsl calls it `train.clip_eps`)"),
    ("train.gradient_accumulation_steps=4", "(TRL's name; masdsl calls it `train.mini_batch_size`: masdsl accumulates"),
    ("learning_rate=1e-5", "unknown config key `learning_rate` (TRL's name; masdsl calls it `train.lr`)"),
    ("actor_rollout_ref.actor.optim.lr=1e-6", "`actor_rollout_ref.actor.optim.lr` (verl's name; masdsl calls it `train.lr`)"),
    ("actor_rollout_ref.rollout.n=8", "(verl's name; masdsl calls it `train.samples`)"),
    ("data.train_batch_size=32", "(verl's name; masdsl calls it `train.batch`)"),
    ("algorithm.kl_ctrl.kl_coef=0.01", "(verl's name; masdsl calls it `train.kl_coef`: verl puts this KL into the reward"),
    ("algorithm.adv_estimator=grpo", "(verl's name; no masdsl config key: each role names its estimator in the `.mas` "
                                     "file, `advantage NAME` in the role (grpo, drgrpo, rloo, grpo_agent_norm; grpo without"),
    ("n_samples_per_prompt=8", "(OpenRLHF's name; masdsl calls it `train.samples`)"),
    ("~train.beta", "unknown config key `train.beta` (TRL's name; masdsl calls it `train.kl_coef`)"),
])
def test_an_other_librarys_name_gets_the_masdsl_key(override, says):
    assert says in refused(override)


@pytest.mark.parametrize("override, says", [  # the masdsl key lives in another section than the one written
    ("train.max_completion_length=64", 'masdsl calls it `sample."*".max_tokens` for every role, '
                                       "`sample.<role>.max_tokens` for one, `max_tokens` in a role's `sample { }` block"),
    ("sample.coder.max_completion_length=64", "(TRL's name; masdsl calls it `sample.coder.max_tokens`)"),
    ("train.temperature=0.7", 'masdsl\'s `temperature` is `sample."*".temperature` for every role'),
    ("train.max_prompt_length=512", "(TRL's name; masdsl calls it `runtime.max_prompt_tokens`)"),
    ("train.model_name_or_path=m", 'masdsl calls it `policy."*".model` for every policy, `policy.<name>.model` for one'),
    ("policy.shared.model_name_or_path=m", "(TRL's name; masdsl calls it `policy.shared.model`)"),
    ("runtime.seed=3", "unknown config key `runtime.seed` (masdsl's `seed` is `train.seed`)"),
    ("train.engine=hf", "(masdsl's `engine` is `runtime.engine`)"),
])
def test_a_name_whose_masdsl_key_is_in_another_section_resolves(override, says):
    assert says in refused(override)


def test_following_the_hint_gives_a_configuration_that_resolves():
    """The keys the hints name are real: what `train.max_completion_length` points at is taken."""
    cfg = resolve_config(overrides=["sample.*.max_tokens=64", "train.lr=1e-5", "train.kl_coef=0.1", "train.samples=8"])
    assert (cfg.sample["*"].max_tokens, cfg.train.lr, cfg.train.kl_coef, cfg.train.samples) == (64, 1e-5, 0.1, 8)


@pytest.mark.parametrize("override, says", [  # issue 43: hints that went by spelling now go by meaning
    ("train.kl=0.1", "unknown config key `train.kl` (a common name; masdsl calls it `train.kl_coef`)"),  # was `train.lr`
    ("train.logging_steps=5", "unknown config key `train.logging_steps` (TRL's and OpenRLHF's name; no masdsl config "
                              "key: masdsl logs every step's metrics (MLflow and the terminal); `train.eval_every` sets "
                              "the steps between evaluations)"),  # was `train.steps`
    ("policy.shared.learning_rate=1e-5",
     "unknown config key `policy.shared.learning_rate` (TRL's name; masdsl calls it `policy.shared.lr`)"),  # was train.lr
    ("sample.coder.num_generations=8",
     "unknown config key `sample.coder.num_generations` (TRL's name; masdsl calls it `sample.coder.samples`)"),
    ("train.warmup_steps=10", "(TRL's name; no masdsl config key: masdsl's learning rate is constant: `train.lr`, "
                              "or a policy's own `lr`)"),  # was `train.steps`
    ("train.scale_rewards=false", "(TRL's name; no masdsl config key: `scale_rewards=false` is `advantage drgrpo`"),
])
def test_a_researchers_name_is_hinted_by_meaning_not_spelling(override, says):
    assert says in refused(override)


def test_the_per_policy_hint_names_a_key_the_policy_section_takes():
    assert resolve_config(overrides=["policy.shared.lr=1e-5"]).policy["shared"].lr == 1e-5


@pytest.mark.parametrize("override, says", [  # a typo of a masdsl name: the spelling hint, as before
    ("train.sampels=3", "unknown config key `train.sampels` (did you mean `train.samples`?)"),
    ("runtime.engin=hf", "unknown config key `runtime.engin` (did you mean `runtime.engine`?)"),
    ("sample.coder.max_token=64", "unknown config key `sample.coder.max_token` (did you mean `sample.coder.max_tokens`?)"),
])
def test_a_spelling_mistake_still_gets_the_spelling_hint(override, says):
    assert refused(override) == says


def test_a_name_nobody_uses_gets_no_ecosystem_hint():
    assert ecosystem_hint("train.xyzzy") is None
    said = refused("train.xyzzy=1")
    assert "name;" not in said and "masdsl's" not in said, said  # only the spelling (or nothing) answers


def _schema_key(target: str) -> bool:
    section, *rest = target.split(".")
    fields = {f.name: f for f in dataclasses.fields(Config)}
    if section not in fields or not rest:
        return False
    if section in NAMED_SECTIONS:
        return len(rest) == 2 and rest[0] == "*" and rest[1] in {f.name for f in dataclasses.fields(NAMED_SECTIONS[section])}
    return len(rest) == 1 and rest[0] in {f.name for f in dataclasses.fields(fields[section].default_factory())}


def test_every_table_entry_maps_to_a_key_the_schema_has():
    table = aliases()
    assert len(table) > 50
    for name, alias in table.items():
        assert _schema_key(alias.target) or (not alias.target and alias.note), (name, alias.target)
        assert name not in schema_keys(), f"`{name}` is masdsl's own name"
        for key in re.findall(r"`((?:train|runtime|tracking|sandbox)\.[a-z_]+)", alias.note):  # keys a note names
            assert _schema_key(key), (name, key)


def test_a_verl_yaml_file_is_named_at_its_full_key_and_line(tmp_path, capsys):
    path = tmp_path / "verl.yaml"
    path.write_text("actor_rollout_ref:\n  model:\n    path: m\n  actor:\n    optim:\n      lr: 1.0e-6\n")
    assert cli.main(["run", str(SUDOKU), "--dry-run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"config file {path}:3:5: unknown config key `actor_rollout_ref.model.path` (verl's name; masdsl calls it " \
           '`policy."*".model`' in err, err


def test_a_trl_file_section_and_a_train_block_get_the_hint(tmp_path, capsys):
    yaml = tmp_path / "trl.yaml"
    yaml.write_text("train:\n  steps: 3\n  num_generations: 8\n")
    assert cli.main(["run", str(SUDOKU), "--dry-run", "--config", str(yaml)]) == 2
    assert f"config file {yaml}:3:3: unknown config key `train.num_generations` (TRL's name; masdsl calls it " \
           "`train.samples`)" in capsys.readouterr().err
    text = SUDOKU.read_text()
    block = re.search(r"^train \{", text, re.M)
    assert block, "sudoku.mas has a train block"
    mas = tmp_path / "w.mas"
    mas.write_text(text[:block.end()] + " learning_rate: 1e-5," + text[block.end():])
    assert cli.main(["check", str(mas)]) == 2
    out = capsys.readouterr()
    assert "error[invalid-train]: unknown config key `train.learning_rate` (TRL's name; masdsl calls it `train.lr`)" \
        in out.out + out.err
