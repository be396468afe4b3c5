"""Command-line overrides in Hydra's grammar (issue 22, item 2): `+key=value` adds (an error when
the key is set), `++key=value` adds or overrides, `~key` / `~key=value` puts a key back to its
default, and a sweep value (`key=a,b`, `range()`, `choice()`) is refused by a command that runs
one configuration; `expand_sweep` makes a sweep's runs as Hydra's basic sweeper does. Every
mistake is a `ConfigError` (exit status 2) naming the override and its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from masdsl import cli
from masdsl.config import ConfigError, expand_sweep, parse_override, resolve_config, sweep_values

ROOT = Path(__file__).parents[1]
SUDOKU = str(ROOT / "workflows" / "sudoku.mas")


def error(*overrides: str, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        resolve_config(overrides=list(overrides), **kw)
    return err.value


# --- + and ++ ---------------------------------------------------------------------------------

def test_plus_adds_a_key_that_is_not_set():
    cfg = resolve_config(overrides=["+policy.shared.model=m", "+runtime.replay_file=out.jsonl", "+sample.coder.top_k=5"])
    assert cfg.policy["shared"].model == "m" and cfg.runtime.replay_file == "out.jsonl"
    assert cfg.sample["coder"].top_k == 5


@pytest.mark.parametrize("overrides, key", [
    (["+train.steps=5"], "train.steps"),  # a schema key with a default is set
    (["policy.shared.model=a", "+policy.shared.model=b"], "policy.shared.model"),
])
def test_plus_on_a_key_that_is_set_is_an_error_like_hydra(overrides, key):
    e = error(*overrides)
    assert e.key == key
    assert f"`{key}` is set already" in str(e)
    assert f"`++{key}=" in str(e) and f"`{overrides[-1][1:]}`" in str(e)  # the two ways out


def test_plus_on_a_key_set_by_the_train_block_or_a_file_is_an_error_too(tmp_path):
    assert error("+train.samples=3", train_block={"samples": 2}).key == "train.samples"
    f = tmp_path / "c.yaml"
    f.write_text("policy:\n  shared:\n    model: x\n")
    assert "set already (to `x`)" in str(error("+policy.shared.model=y", config_file=f))


def test_plus_merges_into_a_mapping_that_is_set():
    cfg = resolve_config(overrides=["policy.p.lora={r: 8}", "+policy.p.lora={alpha: 16}"])
    assert cfg.policy["p"].lora == {"r": 8, "alpha": 16}


def test_double_plus_adds_or_overrides():
    cfg = resolve_config(train_block={"steps": 9}, overrides=["++train.steps=5", "++policy.p.model=m"])
    assert cfg.train.steps == 5 and cfg.policy["p"].model == "m"


def test_unknown_keys_keep_their_did_you_mean_with_any_prefix():
    for item in ("+train.sampels=3", "++train.sampels=3", "~train.sampels"):
        e = error(item)
        assert "unknown config key `train.sampels` (did you mean `train.samples`?)" in str(e), item


# --- ~ ----------------------------------------------------------------------------------------

def test_tilde_resets_a_schema_key_to_its_built_in_default(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  steps: 50\nruntime:\n  engine: hf\n")
    cfg = resolve_config(train_block={"steps": 10, "samples": 2}, config_file=f,
                         overrides=["~train.steps", "~runtime.engine", "~train.samples=2"])
    assert (cfg.train.steps, cfg.runtime.engine, cfg.train.samples) == (3, "auto", 4)


def test_tilde_resets_a_whole_section():
    cfg = resolve_config(overrides=["train.steps=9", "train.lr=0.5", "runtime.engine=hf", "~train"])
    assert (cfg.train.steps, cfg.train.lr, cfg.runtime.engine) == (3, 1e-6, "hf")


def test_tilde_takes_an_entry_out_of_policy_and_sample():
    cfg = resolve_config(overrides=["policy.p.model=a", "policy.q.model=b", "~policy.p",
                                    "sample.coder.top_k=3", "sample.tester.top_k=4", "~sample.tester",
                                    "policy.q.lora={r: 8, alpha: 16}", "~policy.q.lora.alpha"])
    assert list(cfg.policy) == ["q"] and cfg.policy["q"].lora == {"r": 8}
    assert list(cfg.sample) == ["coder"]
    assert resolve_config(overrides=["sample.*.max_tokens=9", "~sample"]).sample == {}


def test_tilde_of_an_entry_field_gives_the_file_back():
    cfg = resolve_config(overrides=["policy.p.model=a", "policy.p.frozen=true", "~policy.p.model"])
    assert cfg.policy["p"].model is None and cfg.policy["p"].frozen is True


def test_tilde_with_a_value_removes_only_that_value():
    e = error("train.steps=9", "~train.steps=5")
    assert "`train.steps` is `9`, not `5`" in str(e) and e.key == "train.steps"
    assert resolve_config(overrides=["train.lr=0.5", "~train.lr=0.5"]).train.lr == 1e-6


@pytest.mark.parametrize("item, says", [
    ("~policy.p", "nothing to remove, `policy.p` is not set"),
    ("~policy.p.model", "nothing to remove, `policy.p.model` is not set"),
    ("~runtime.replay_file", "nothing to remove, `runtime.replay_file` is not set"),
    ("~policy.p.modl", "unknown config key `policy.p.modl` (did you mean `policy.p.model`?)"),
    ("~nope", "unknown config key `nope`"),
])
def test_removing_what_is_not_there_is_an_error(item, says):
    assert says in str(error(item))


def test_a_file_value_an_override_removed_is_not_blamed_on_the_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  samples: 2\n")
    e = error("~train", "train.samples=0", config_file=f)
    assert e.file is None and str(e) == "`train.samples` must be at least 1; got 0"


# --- the grammar ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, op, key, value", [
    ("train.steps=5", "set", "train.steps", "5"),
    ("+a.b=", "add", "a.b", ""),
    ("++a.b=x=y", "force", "a.b", "x=y"),
    ("~a.b", "delete", "a.b", None),
    ("~a.b=3", "delete", "a.b", "3"),
    ('policy."*".model=m', "set", "policy.*.model", "m"),
])
def test_parse_override(text, op, key, value):
    ov = parse_override(text)
    assert (ov.op, ov.key, ov.value, ov.text) == (op, key, value, text)


@pytest.mark.parametrize("text, says", [
    ("train.steps", "override `train.steps` is not of the form key=value (`~train.steps` resets it"),
    ("+train.steps", "override `+train.steps` is not of the form +key=value"),
    ("b.yaml", "(a config file: `--config b.yaml`)"),
    ("=3", "override `=3` has no key"),
    ("train..steps=3", "`train..steps` is not a dotted key"),
])
def test_malformed_overrides(text, says):
    assert says in str(error(text))


def test_a_quoted_or_escaped_comma_stays_in_the_value():
    for item in ("policy.p.model='a,b'", 'policy.p.model="a,b"', r"policy.p.model=a\,b"):
        assert resolve_config(overrides=[item]).policy["p"].model == "a,b", item
    cfg = resolve_config(overrides=['sample.c.stop=["x", "y,z"]', "policy.p.lora={r: 8, alpha: 16}"])
    assert cfg.sample["c"].stop == ["x", "y,z"] and cfg.policy["p"].lora == {"r": 8, "alpha": 16}


# --- sweeps -----------------------------------------------------------------------------------

@pytest.mark.parametrize("item", ["train.lr=1e-5,2e-5", "train.seed=range(1,4)", "policy.p.model=choice(a,b)",
                                  "+train.eval_temperature=0.5,1.0"])
def test_a_sweep_value_is_refused_with_a_pointer_to_masdsl_sweep(item):
    e = error(item)
    assert str(e).startswith(f"override `{item}` is a sweep of ") and e.key == parse_override(item).key
    assert "`masdsl sweep`" in str(e) and "--multirun" in str(e) and "quote" in str(e)


def test_masdsl_run_refuses_a_sweep_before_anything_starts(capsys, tmp_path):
    code = cli.main(["run", SUDOKU, "train.lr=1e-5,2e-5", f"runtime.runs_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "is a sweep of 2 values (`1e-5`, `2e-5`)" in err and "masdsl sweep" in err and "bug" not in err
    assert not any(tmp_path.iterdir())  # no run folder


@pytest.mark.parametrize("command", ["eval", "graph"])
def test_eval_and_graph_refuse_a_sweep_too(command, capsys):
    assert cli.main([command, SUDOKU, "train.samples=2,4"]) == 2
    assert "is a sweep of 2 values" in capsys.readouterr().err


def test_expand_sweep_is_the_cartesian_product_in_order():
    runs = expand_sweep(["a=1,2", "b=x", "+c=p,q,r"])
    assert runs == [[f"a={a}", "b=x", f"+c={c}"] for a in "12" for c in "pqr"]
    assert expand_sweep(["a=1"]) == [["a=1"]] and expand_sweep([]) == [[]]
    for run in expand_sweep(["train.lr=1e-5,2e-5", "train.grouping=at,trajectory", "~train.steps"]):
        resolve_config(overrides=run)  # each run resolves: no sweep left


@pytest.mark.parametrize("value, values", [
    ("range(1,4)", ["1", "2", "3"]),
    ("range(3)", ["0", "1", "2"]),
    ("range(start=2, stop=8, step=3)", ["2", "5"]),
    ("range(1, 0, -0.5)", ["1.0", "0.5"]),
    ("range(0,1,0.25)", ["0.0", "0.25", "0.5", "0.75"]),
    ("choice(a, 'b,c', [1,2])", ["a", "'b,c'", "[1,2]"]),
    ("choice(x)", ["x"]),
    ("1,range(2,4),choice(a)", ["1", "2", "3", "a"]),
    ("'a,b',c", ["'a,b'", "c"]),
    ("[1,2],[3]", ["[1,2]", "[3]"]),
    ("{r: 8},{r: 16}", ["{r: 8}", "{r: 16}"]),
    ("x, y", ["x", "y"]),
])
def test_sweep_values(value, values):
    assert sweep_values(value) == values


@pytest.mark.parametrize("value", ["[1,2]", "{r: 8, a: 1}", "'a,b'", r"a\,b", "f(1,2)", "abc", "(1,2"])
def test_one_value_is_no_sweep(value):
    assert sweep_values(value) is None


@pytest.mark.parametrize("item, says", [
    ("a=1,,2", "an empty value between commas"),
    ("a=glob(*)", "`glob(...)` is not one of the sweeps masdsl expands"),
    ("a=range(1,4,0)", "must be `range(start, stop)`"),
    ("a=range(x,4)", "must be `range(start, stop)`"),
    ("a=range(4,1)", "gives no values"),
    ("a=choice()", "`choice()` needs at least one value"),
    ("~a=1,2", "a removal takes one value"),
])
def test_expand_sweep_mistakes(item, says):
    with pytest.raises(ConfigError, match=None) as err:
        expand_sweep([item])
    assert says in str(err.value) and err.value.key == "a"
