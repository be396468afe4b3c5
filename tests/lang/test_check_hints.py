"""`masdsl check`'s hints for a `train { }` block and a missing file (issue 43, item 5): every
mistake of the block at once, each at its file:line:col with a hint by meaning; a data, prompt
or import file that is not there gets the file beside it that was meant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from masdsl.cli import main as cli

WORKFLOW = """workflow w "math on a file"
{imports}env math
data train "data/train.jsonl"
data eval "data/train.jsonl"
policy shared {{ model: "smollm2-135m-instruct" }}
role solver {{
  policy shared
  prompt {prompt}
  parse answer = boxed(output)
  reward correct(answer, task.answer)
}}
flow {{
  start -> solver -> end
}}
{train}"""
TRAIN = """train {
  samples: 4,
  kl: 0.1,
  logging_steps: 5,
  sampels: 2,
  steps: "three",
  policy: { shared: { learning_rate: 1e-5 } }
}
"""


def write(tmp_path: Path, train: str = "", prompt: str = '"{{ task.question }}"', imports: str = "") -> Path:
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "train.jsonl").write_text(json.dumps({"id": "q0", "question": "1+1", "answer": "2"}) + "\n")
    mas = tmp_path / "w.mas"
    mas.write_text(WORKFLOW.format(train=train, prompt=prompt, imports=imports))
    return mas


def check(capsys, mas: Path) -> tuple[int, str]:
    code = cli(["check", str(mas), "--color=never"])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_a_train_block_reports_every_mistake_at_its_key(tmp_path, capsys):
    code, said = check(capsys, write(tmp_path, TRAIN))
    assert code == 2, said
    mas = tmp_path / "w.mas"
    assert said.count("error[invalid-train]") == 5, said
    for line, col, message in [
        (17, 3, "unknown config key `train.kl` (a common name; masdsl calls it `train.kl_coef`)"),
        (18, 3, "unknown config key `train.logging_steps` (TRL's and OpenRLHF's name; no masdsl config key"),
        (19, 3, "unknown config key `train.sampels` (did you mean `train.samples`?)"),
        (20, 3, "`train.steps`: Value 'three' of type 'str' could not be converted to Integer"),
        (21, 23, "unknown config key `policy.shared.learning_rate` (TRL's name; masdsl calls it `policy.shared.lr`)"),
    ]:
        assert f"{message}" in said, said
        assert f"--> {mas}:{line}:{col}\n" in said or f"--> {mas.name}:{line}:{col}\n" in said, (line, said)


def test_a_clean_train_block_still_checks_clean(tmp_path, capsys):
    code, said = check(capsys, write(tmp_path, "train { samples: 2, kl_coef: 0.1, eval_every: 5 }\n"))
    assert code == 0, said


@pytest.mark.parametrize("beside, written", [("train.json", "train.jsonl"), ("Train.jsonl", "train.jsonl"),
                                             ("train.jsonl", "trian.jsonl")])
def test_a_missing_data_file_names_the_file_beside_it(tmp_path, capsys, beside, written):
    mas = write(tmp_path)
    (tmp_path / "data" / "train.jsonl").rename(tmp_path / "data" / beside)
    mas.write_text(mas.read_text().replace('"data/train.jsonl"', f'"data/{written}"', 1))
    code, said = check(capsys, mas)
    assert code == 2 and f"error[missing-file]: data file `data/{written}` does not exist" in said, said
    assert f"help: did you mean `data/{beside}`?" in said, said


def test_a_missing_prompt_or_import_file_names_the_file_beside_it(tmp_path, capsys):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "solver.txt").write_text("{{ task.question }}")
    (tmp_path / "rewards.py").write_text("")
    code, said = check(capsys, write(tmp_path, prompt='file "prompts/solver.j2"', imports='import "reward.py"\n'))
    assert code == 2
    assert "help: did you mean `prompts/solver.txt`?" in said and "help: did you mean `rewards.py`?" in said, said


def test_a_missing_file_with_nothing_like_it_gets_no_guess(tmp_path, capsys):
    mas = write(tmp_path)
    mas.write_text(mas.read_text().replace('"data/train.jsonl"', '"data/zzzz.parquet"', 1))
    code, said = check(capsys, mas)
    assert code == 2 and "does not exist" in said and "did you mean" not in said, said


@pytest.mark.parametrize("decorator", ["parser", "function", "env", "data_source"])
def test_a_decorator_written_without_its_name_says_how_to_write_it(tmp_path, capsys, decorator):
    (tmp_path / "bare.py").write_text(f"from masdsl.envs.registry import {decorator}\n\n\n@{decorator}\n"
                                      "def first_word(output):\n    return output\n")
    code, said = check(capsys, write(tmp_path, imports='import "bare.py"\n'))
    assert code == 2 and "error[import-error]: importing `bare.py` raised an error" in said, said
    assert f'@{decorator} needs the name the `.mas` file calls it by: @{decorator}("first_word", ...)' in said, said
