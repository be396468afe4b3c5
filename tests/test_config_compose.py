"""Several `--config` files (applied in order, later wins) and a YAML file's `defaults:` list
(Hydra's composition: files relative to it, in order, `_self_` last unless placed) (issue 22,
item 2). A missing file, a cycle, `_self_` twice, an entry that is no file name: exit status 2
at the entry's file:line:col."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from masdsl import cli
from masdsl.config import ConfigError, resolve_config

ROOT = Path(__file__).parents[1]
SUDOKU = str(ROOT / "workflows" / "sudoku.mas")


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def mistake(paths, *overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        resolve_config(config_file=paths, overrides=list(overrides))
    return err.value


def test_several_files_apply_in_order(tmp_path):
    a = write(tmp_path, "a.yaml", "train:\n  steps: 5\n  samples: 2\n")
    b = write(tmp_path, "b.yaml", "train:\n  steps: 7\nruntime:\n  engine: hf\n")
    cfg = resolve_config(config_file=[a, b])
    assert (cfg.train.steps, cfg.train.samples, cfg.runtime.engine) == (7, 2, "hf")
    assert resolve_config(config_file=[b, a]).train.steps == 5
    assert resolve_config(config_file=[a, b], overrides=["train.steps=1"]).train.steps == 1
    assert resolve_config(config_file=str(a)).train.steps == 5  # one path, as before


def test_a_bad_value_is_blamed_on_the_last_file_that_set_it(tmp_path):
    a = write(tmp_path, "a.yaml", "train:\n  samples: 0\n")
    b = write(tmp_path, "b.yaml", "\n\ntrain:\n  samples: 0\n")
    e = mistake([a, b])
    assert (e.file, e.line, e.col, e.key) == (str(b), 4, 12, "train.samples")
    ok = write(tmp_path, "ok.yaml", "train:\n  samples: 2\n")
    assert mistake([a, ok], "train.samples=0").file is None  # set later by the override


def test_defaults_compose_relative_files_before_the_file_itself(tmp_path):
    write(tmp_path, "base/common.yaml", "train:\n  steps: 5\n  samples: 2\n  lr: 0.1\n")
    write(tmp_path, "base/more.yml", "train:\n  samples: 3\n")
    top = write(tmp_path, "exp/top.yaml", "defaults:\n  - ../base/common\n  - ../base/more.yml\ntrain:\n  lr: 0.5\n")
    cfg = resolve_config(config_file=top)
    assert (cfg.train.steps, cfg.train.samples, cfg.train.lr) == (5, 3, 0.5)  # in order, the file last


def test_self_first_lets_the_defaults_win(tmp_path):
    write(tmp_path, "base.yaml", "train:\n  steps: 5\n")
    top = write(tmp_path, "top.yaml", "defaults: [_self_, base]\ntrain:\n  steps: 9\n  samples: 2\n")
    cfg = resolve_config(config_file=top)
    assert (cfg.train.steps, cfg.train.samples) == (5, 2)


def test_nested_defaults_and_a_shared_base(tmp_path):
    write(tmp_path, "base.yaml", "train:\n  steps: 5\n  batch: 1\n")
    write(tmp_path, "left.yaml", "defaults: [base]\ntrain:\n  batch: 2\n")
    write(tmp_path, "right.yaml", "defaults: [base]\ntrain:\n  samples: 2\n")
    top = write(tmp_path, "top.yaml", "defaults: [left, right]\n")
    cfg = resolve_config(config_file=top)
    # base, left, base again, right, top: right's base puts batch back to 1
    assert (cfg.train.steps, cfg.train.batch, cfg.train.samples) == (5, 1, 2)


def test_a_value_of_a_composed_file_is_blamed_on_that_file(tmp_path):
    base = write(tmp_path, "base.yaml", "train:\n  grouping: nope\n")
    top = write(tmp_path, "top.yaml", "defaults: [base]\n")
    e = mistake(top)
    assert (e.file, e.line, e.key) == (str(base), 2, "train.grouping")
    write(tmp_path, "typo.yaml", "runtime:\n  engin: hf\n")
    e = mistake(write(tmp_path, "top2.yaml", "defaults: [typo]\n"))
    assert str(e).startswith(f"config file {tmp_path / 'typo.yaml'}:2:3: unknown config key `runtime.engin`")


@pytest.mark.parametrize("files, top, says, line, col", [
    ({}, "defaults:\n  - nope\n", r"`defaults` names `nope`: no such file \(.*nope or .*nope\.yaml or .*nope\.yml\)", 2, 5),
    ({}, "train:\n  steps: 3\ndefaults: [x.yaml]\n", r"`defaults` names `x.yaml`: no such file", 3, 12),
    ({"top.yaml": None}, "defaults: [top]\n", r"`defaults` names `top`, which is already being composed: a cycle \(.*top\.yaml -> .*top\.yaml\)", 1, 12),
    ({"b.yaml": "defaults:\n  - top.yaml\n"}, "defaults: [b]\n", None, 2, 5),
    ({"sub/x.yaml": "a: 1"}, "defaults: [sub]\n", r"`defaults` names `sub`, a folder, not a YAML file", 1, 12),
    ({}, "defaults: [_self_, _self_]\n", r"`defaults` lists `_self_` twice", 1, 20),
    ({}, "defaults:\n  - db: mysql\n", r"a `defaults` entry names a YAML file .*\(masdsl has no config groups", 2, 5),
    ({}, "defaults:\n  - 3\n", r"a `defaults` entry names a YAML file .*; got `3`", 2, 5),
    ({}, "defaults: base.yaml\n", r"`defaults` must be a list of YAML files to compose", 1, 11),
], ids=["missing", "missing, later line", "itself", "a cycle through another", "a folder", "self twice",
        "a config group", "a number", "not a list"])
def test_defaults_mistakes_exit_2_at_file_line(files, top, says, line, col, tmp_path, capsys):
    for name, text in files.items():
        if text is not None:
            write(tmp_path, name, text)
    path = write(tmp_path, "top.yaml", top)
    code = cli.main(["run", SUDOKU, "--config", str(path), "--print-config"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "bug in masdsl" not in err
    where = tmp_path / ("b.yaml" if "b.yaml" in files else "top.yaml")
    assert err.startswith(f"config file {where}:{line}:{col}: "), err
    if says:
        assert re.search(says, err), err
    else:
        assert f"a cycle ({path} -> {tmp_path / 'b.yaml'} -> {tmp_path / 'top.yaml'})" in err, err


def test_the_cli_takes_config_again_before_and_after_the_file(tmp_path, capsys):
    a = write(tmp_path, "a.yaml", "train:\n  steps: 5\n  samples: 2\n")
    b = write(tmp_path, "b.yaml", "train:\n  steps: 7\n")
    c = write(tmp_path, "c.yaml", "train:\n  batch: 3\n")
    code = cli.main(["run", "--config", str(a), SUDOKU, "--config", str(b), "train.lr=0.5", "--config", str(c),
                     "--print-config"])
    out = capsys.readouterr().out
    assert code == 0
    train = yaml.safe_load(out)["train"]
    assert (train["steps"], train["samples"], train["batch"], train["lr"]) == (7, 2, 3, 0.5)


@pytest.mark.parametrize("command", [["graph"], ["eval", "--tasks", "1"]])
def test_graph_and_eval_take_several_files_too(command, tmp_path, capsys):
    a = write(tmp_path, "a.yaml", "runtime:\n  engine_replicas: 2\n")
    b = write(tmp_path, "b.yaml", "runtime:\n  engine_replicas: 3\n")
    bad = write(tmp_path, "bad.yaml", "train:\n  samples: 0\n")
    # a later file wins: the bad value is reported in the second file whatever the command
    code = cli.main([command[0], SUDOKU, "--config", str(a), "--config", str(bad), *command[1:]])
    assert code == 2 and f"config file {bad}:2:12:" in capsys.readouterr().err
    if command == ["graph"]:
        assert cli.main(["graph", SUDOKU, "--config", str(a), "--config", str(b), "runtime.ray=true"]) == 0
        assert "3 Ray actors" in capsys.readouterr().out
