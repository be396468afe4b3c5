"""The sandbox's ordinary behaviour: results, per-test reports, io tests, the cache and the pool."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from masdsl import sandbox
from masdsl.config import Config, SandboxConfig
from masdsl.errors import UserError
from masdsl.sandbox import Limits, limits_from_config, run_python, run_tests, run_tests_many
from masdsl.sandbox.process import CHILD_PARTS


def test_run_python_reports_stdout_stderr_and_status():
    ok = run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert (ok.ok, ok.stdout, ok.stderr, ok.returncode) == (True, "out\n", "err\n", 0)
    bad = run_python("raise ValueError('boom')")
    assert not bad.ok and bad.returncode == 1 and "ValueError: boom" in bad.stderr
    harness = [name.removesuffix(".py") for name in CHILD_PARTS] + ["masdsl", "_run_main"]
    assert not [name for name in harness if name in bad.stderr], bad.stderr  # no harness frames
    assert run_python("import sys\nsys.exit(3)").returncode == 3


def test_stdin_is_passed_and_workdir_is_fresh_and_removed():
    first = run_python("import os\nopen('f.txt', 'w').write('x')\nprint(os.getcwd(), sorted(os.listdir('.')))")
    second = run_python("import os\nprint(os.getcwd(), sorted(os.listdir('.')))", "ignored")
    dir1, dir2 = first.stdout.split()[0], second.stdout.split()[0]
    assert dir1 != dir2 and "f.txt" not in second.stdout
    import os

    assert not os.path.exists(dir1) and not os.path.exists(dir2)
    assert run_python("print(input() + input())", "ab\ncd\n").stdout == "abcd\n"


def test_assert_tests_are_judged_one_by_one():
    code = "def f(x):\n    return x * 2"
    tests = ["assert f(1) == 2", "assert f(2) == 5", "raise KeyError('k')", "assert g(1) == 2", "assert f(3) == 6"]
    report = run_tests(code, tests)
    assert report.passed == [True, False, False, False, True]
    assert [r.status for r in report.results] == ["pass", "fail", "error", "error", "pass"]
    assert report.pass_rate == 0.4
    assert "NameError" in report.results[3].error


def test_a_crashing_test_does_not_take_the_others_down():
    tests = ["assert True", "import os\nos._exit(1)", "import sys\nsys.setrecursionlimit(10**6)\ndef r(n): return r(n + 1)\nr(0)",
             "assert f() == 1"]
    report = run_tests("def f():\n    return 1", tests, limits=Limits(timeout_s=3))
    assert report.passed == [True, False, False, True]
    assert report.results[1].status == "crash"


def test_code_that_fails_to_load_fails_every_test():
    report = run_tests("def f(:\n  pass", ["assert f() == 1", "assert True"])
    assert report.passed == [False, False] and "SyntaxError" in report.setup_error
    hang = run_tests("while True: pass", ["assert True"], limits=Limits(timeout_s=0.5))
    assert hang.passed == [False] and hang.results[0].status == "timeout"


def test_io_tests_compare_whitespace_normalised_output():
    code = "a, b = map(int, input().split())\nprint(a + b)\nprint()"
    tests = [{"input": "1 2\n", "output": "3"}, {"input": "2 2", "output": "  4 \n\n"}, ("5 5", "11"),
             {"input": "x y", "output": "0"}]
    report = run_tests(code, tests)
    assert report.passed == [True, True, False, False]
    assert report.results[2].output.strip() == "10"
    assert report.results[3].status == "error" and "ValueError" in report.results[3].error


def test_io_programs_may_use_sys_exit_and_raw_stdin():
    code = "import sys\ndata = sys.stdin.buffer.read().split()\nsys.stdout.write(str(sum(map(int, data))))\nsys.exit(0)"
    assert run_tests(code, [{"input": "1 2 3", "output": "6"}, {"input": "4", "output": "4"}]).passed == [True, True]


def test_identical_runs_are_cached():
    sandbox.CACHE.clear()
    code, tests = "x = 41 + 1", ["assert x == 42"]
    first = run_tests(code, tests)
    hits = sandbox.CACHE.hits
    assert run_tests(code, tests) is first and sandbox.CACHE.hits == hits + 1
    run_tests(code, ["assert x == 43"])
    assert sandbox.CACHE.hits == hits + 1  # different tests: a new run


def test_timeouts_are_not_cached():
    sandbox.CACHE.clear()
    limits = Limits(timeout_s=0.3)
    run_python("while True: pass", limits=limits)
    assert sandbox.CACHE.get(("run", "while True: pass", "", limits)) is None


def test_pool_runs_many_in_order():
    jobs = [(f"def f():\n    return {i}", [f"assert f() == {i}", "assert f() == 3"]) for i in range(8)]
    reports = run_tests_many(jobs)
    assert [r.passed for r in reports] == [[True, i == 3] for i in range(8)]


def test_limits_from_config():
    limits = limits_from_config({"timeout_s": 2, "memory_mb": 256, "isolation": "none"})
    assert (limits.timeout_s, limits.memory_mb, limits.isolation, limits.max_procs) == (2.0, 256, "none", Limits().max_procs)


def test_limits_from_config_takes_the_config_block_a_whole_config_or_a_mapping():
    block = SandboxConfig(timeout_s=3, max_procs=8, max_output_kb=32, isolation="none")
    want = Limits(timeout_s=3.0, max_procs=8, max_output_kb=32, isolation="none")
    assert limits_from_config(block) == want
    assert limits_from_config(Config(sandbox=block)) == want
    assert limits_from_config(dataclasses.asdict(block)) == want
    assert limits_from_config(OmegaConf.structured(Config(sandbox=block))) == want
    assert limits_from_config(want) is want and limits_from_config(None) == Limits()
    with pytest.raises(UserError, match="did you mean `timeout_s`"):
        limits_from_config({"timeout": 2})
    with pytest.raises(UserError):
        limits_from_config({"memory_mb": "lots"})


def test_default_limits_are_the_configs():
    """One default set: a plain `Limits()` is what a run made through the default config gets."""
    assert limits_from_config(SandboxConfig()) == Limits()
    names = {f.name for f in dataclasses.fields(SandboxConfig)}
    plain = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(Limits()).items()}
    assert {k: plain[k] for k in names} == dataclasses.asdict(SandboxConfig())  # packages: a tuple, hashable
    assert limits_from_config({"packages": ["numpy", "numpy"]}).packages == ("numpy",)
    assert limits_from_config({"packages": "numpy"}).packages == ("numpy",)


def test_no_module_holds_a_default_callers_could_change():
    for gone in ("set_default_limits", "DEFAULT_LIMITS", "UsesSandboxLimits"):
        assert not hasattr(sandbox, gone) and not hasattr(sandbox.run, gone)


def test_bad_limits_and_tests_are_user_errors():
    with pytest.raises(UserError):
        Limits(isolation="docker")
    with pytest.raises(UserError):
        run_tests("x = 1", [1, 2])


def test_io_outputs_are_capped_per_test_not_per_run():
    big = Limits().max_output_kb * 1024 // 2  # 8 tests x half the output cap: over it together, each under it
    tests = [{"input": str(big), "output": "x" * big}] * 8
    assert run_tests("print('x' * int(input()))", tests).passed == [True] * 8
    small = Limits(max_output_kb=16)
    report = run_tests("print('x' * int(input()))", [{"input": "100", "output": "x" * 100}, tests[0]], limits=small)
    assert report.passed == [True, False]


def test_fallback_isolation_modes_still_run_and_limit():
    for isolation in ("unshare", "none"):
        limits = Limits(isolation=isolation, timeout_s=1.0)
        assert run_python("print(6 * 7)", limits=limits).stdout == "42\n", isolation
        assert run_tests("def f():\n    return 1", ["assert f() == 1", "assert f() == 2"], limits=limits).passed == [True, False]
        assert run_python("while True:\n    pass", limits=limits).timed_out
        assert isolation in sandbox.isolation_summary(limits) or "no namespaces" in sandbox.isolation_summary(limits)
