"""A malformed `--config` YAML is a user error (exit 2), never "a bug in masdsl" (exit 3): the
message names the file, the line and column (of YAML's mark for a syntax error, of the key or
value for the rest) and, for a wrong type or range, the key (issue 21, item 3). `ConfigError`
carries the key, file, line and column as fields."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from masdsl import cli
from masdsl.config import ConfigError, resolve_config

ROOT = Path(__file__).parents[1]
SUDOKU = str(ROOT / "workflows" / "sudoku.mas")

MISTAKES = [  # (name, file text, what stderr says after `config file <path>`)
    ("syntax", "train:\n  steps: [1\n", r":3:1: not valid YAML: did not find expected ',' or ']'"),
    ("duplicate key", "train:\n  steps: 3\ntrain:\n  steps: 4\n", r":3:1: not valid YAML: found duplicate key train"),
    ("tab", "train:\n  steps: 3\n\t lr: 1\n", r":3:1: not valid YAML: a tab character; YAML indents and separates "
                                           r"with spaces only \(replace the tab with spaces\)"),
    ("tab indent", "train:\n\tsteps: 3\n", r":2:1: not valid YAML: a tab character;"),  # PyYAML: "cannot start any token"
    ("tab after colon", "train:\n  steps:\t3\n", r":2:9: not valid YAML: a tab character;"),  # PyYAML: "character '\t'"
    ("unquoted star", "sample:\n  *: { max_tokens: 4096 }\n", r':2:4: not valid YAML: .*\(quote the every-role key: `"\*":`\)'),
    ("top-level list", "- train\n- runtime\n", r":1:1: the top level must be a mapping of sections .*; got a list"),
    ("top-level value", "3\n", r":1:1: the top level must be a mapping of sections .*; got the value `3`"),
    ("section value", "train: 3\n", r":1:8: `train`: must be a mapping of keys; got `3`"),
    ("type", "train:\n  steps: abc\n", r":2:10: `train.steps`: Value 'abc' of type 'str' could not be converted to Integer"),
    ("range", "train:\n  samples: 0\n", r":2:12: `train.samples` must be at least 1; got 0"),
    ("choice", "train:\n  grouping: nope\n", r":2:13: `train.grouping` must be one of at, agent, turn, trajectory; got `nope`"),
    ("unknown key", "runtime:\n  engin: hf\n", r":2:3: unknown config key `runtime.engin` \(did you mean `runtime.engine`\?\)"),
    ("every-role range", 'sample:\n  "*":\n    max_tokens: 0\n', r":3:17: `sample.\*.max_tokens` must be a whole number of at least 1; got 0"),
    ("role type", "sample:\n  tester:\n    temperature: hot\n", r":3:18: `sample.tester.temperature`: Value 'hot'"),
    ("interpolation", "train:\n  steps: ${nope}\n", r":2:10: `train.steps`: Interpolation key 'nope' not found"),
]


def _run(capsys, config: Path, *overrides: str) -> tuple[int, str]:
    code = cli.main(["run", SUDOKU, "--config", str(config), *overrides])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("name, text, says", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_yaml_mistake_exits_2_naming_the_file_line_and_key(name, text, says, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    code, err = _run(capsys, bad)
    assert code == 2, err
    assert "bug in masdsl" not in err
    assert re.search(f"config file {re.escape(str(bad))}{says}", err), err


@pytest.mark.parametrize("make, says", [
    (lambda p: p.mkdir(), "is a folder, not a YAML file"),
    (lambda p: p.write_bytes(b"train:\n  steps: \xff\n"), None),
    (lambda p: None, "does not exist"),
], ids=["a folder", "not UTF-8", "no such file"])
def test_a_file_that_is_no_yaml_text_exits_2(make, says, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    make(bad)
    code, err = _run(capsys, bad)
    assert code == 2, err
    assert "bug in masdsl" not in err
    assert (f"config file `{bad}` {says}" if says else f"config file {bad}:2:10: not UTF-8 text (byte 0xff)") in err, err


def test_the_error_carries_key_file_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  steps: 3\n  samples: 0\n")
    with pytest.raises(ConfigError) as err:
        resolve_config(config_file=bad)
    e = err.value
    assert (e.key, e.file, e.line, e.col) == ("train.samples", str(bad), 3, 12)
    with pytest.raises(ConfigError) as err:  # a key path without a file: the train block's own mistakes
        resolve_config(train_block={"samples": 0})
    assert (err.value.key, err.value.file, str(err.value)) == ("train.samples", None, "`train.samples` must be at least 1; got 0")


def test_a_value_an_override_set_is_not_blamed_on_the_file(tmp_path):
    ok = tmp_path / "ok.yaml"
    ok.write_text("train:\n  samples: 2\n")
    with pytest.raises(ConfigError) as err:
        resolve_config(config_file=ok, overrides=["train.samples=0"])
    assert str(err.value) == "`train.samples` must be at least 1; got 0" and err.value.file is None
