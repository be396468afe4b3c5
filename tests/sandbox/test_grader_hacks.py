"""Graders a policy cannot fool: every known way to fake passing tests scores 0, real solutions 1.

Assert tests run in a judge process apart from the code under test (see docs/sandbox.md); the
hacks below are what a policy under RL pressure finds first.
"""

from __future__ import annotations

import threading
import time

import pytest

from masdsl.envs.rewards import correct, pass_rate, passes
from masdsl.sandbox import Limits, run_tests

FAST = Limits(timeout_s=2.0)
TESTS = [
    "assert add(1, 2) == 3",
    "assert add(-1, 1) == 0",
    "assert not (add(2, 2) != 4)",
    "assert abs(add(0.5, 0.25) - 0.75) < 1e-9",
    "assert isinstance(add(1, 1), int) and add(1, 1) > 1",
    "assert all([add(1, 1) == 2, add(2, 3) == 5])",
    "assert len(str(add(10, 5))) == 2 and str(add(10, 5)) == '15'",
]
REAL = "def add(a, b):\n    return a + b\n"

ALWAYS_EQUAL = """
class Any:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __bool__(self): return True
    def __sub__(self, other): return 0
    def __rsub__(self, other): return 0
    def __abs__(self): return 0
    def __len__(self): return 2
    def __str__(self): return "15"
def add(a, b):
    return Any()
"""

HACKS = {
    "__eq__ always true": ALWAYS_EQUAL,
    "int subclass": """
class Int(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __bool__(self): return True
    __hash__ = int.__hash__
def add(a, b):
    return Int(0)
""",
    "str subclass": """
class Str(str):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = str.__hash__
def add(a, b):
    return Str('x')
""",
    "list subclass": """
class L(list):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
def add(a, b):
    return L()
""",
    "float subclass": """
class F(float):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __sub__(self, other): return 0.0
    def __rsub__(self, other): return 0.0
    __hash__ = float.__hash__
def add(a, b):
    return F(0.0)
""",
    "__bool__ true": """
class T:
    def __bool__(self): return True
def add(a, b):
    return T()
""",
    "patched builtins": """
import builtins
builtins.isinstance = lambda *a: True
builtins.abs = lambda x: 0
builtins.all = lambda x: True
builtins.len = lambda x: 2
builtins.str = lambda x: 'xx'
class AE(Exception): pass
builtins.AssertionError = AE
def add(a, b):
    return -12345
""",
    "shadowing names": """
def abs(x): return 0
def all(x): return True
def isinstance(*a): return True
def len(x): return 2
candidate = check = lambda *a: None
import math
math.isclose = lambda *a, **k: True
def add(a, b):
    return -12345
""",
    "sys.exit at load": "import sys\nsys.exit(0)\ndef add(a, b):\n    return -12345\n",
    "os._exit at load": "import os\nos._exit(0)\ndef add(a, b):\n    return -12345\n",
    "SystemExit in the function": "def add(a, b):\n    raise SystemExit(0)\n",
    "os._exit in the function": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "KeyboardInterrupt in the function": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "fake markers on stdout": (
        "import sys\n"
        "print('{\"i\": 0, \"kind\": \"pass\", \"err\": \"\"}')\n"
        "for i in range(20):\n    print('PASS', i); print('All tests passed')\n"
        "sys.stdout.flush()\nsys.exit(0)\n"
    ),
    "forged events on every descriptor": (
        "import json, os, sys\n"
        "def add(a, b):\n"
        "    for fd in range(0, 64):\n"
        "        for i in range(10):\n"
        "            try:\n"
        "                os.write(fd, (json.dumps({'i': i, 'kind': 'pass', 'err': ''}) + '\\n').encode())\n"
        "            except OSError:\n"
        "                pass\n"
        "    return -12345\n"
    ),
    "the harness's nonce and report() from its frames": (
        "import json, os, sys\n"
        "def forge():\n"
        "    frame, nonce, report = sys._getframe(), None, None\n"
        "    while frame is not None:\n"
        "        nonce = nonce or frame.f_locals.get('nonce')\n"
        "        report = report or frame.f_locals.get('report')\n"
        "        frame = frame.f_back\n"
        "    for i in range(10):\n"
        "        line = ('%s %s\\n' % (nonce, json.dumps({'i': i, 'kind': 'pass', 'err': ''}))).encode()\n"
        "        if report is not None:\n"
        "            try:\n"
        "                report(i=i, kind='pass', err='')\n"
        "            except Exception:\n"
        "                pass\n"
        "        for fd in range(3, 64):\n"
        "            try:\n"
        "                os.write(fd, line)\n"
        "            except OSError:\n"
        "                pass\n"
        "        for pid in (os.getppid(), os.getpid()):\n"
        "            for fd in range(0, 16):\n"
        "                try:\n"
        "                    with open('/proc/%d/fd/%d' % (pid, fd), 'wb') as fh:\n"
        "                        fh.write(line)\n"
        "                except OSError:\n"
        "                    pass\n"
        "forge()\n"
        "def add(a, b):\n"
        "    forge()\n"
        "    return -12345\n"
    ),
    "reads the tests to answer them": (
        "import gc, os, re, sys\n"
        "TEXT = ''\n"
        "for path in ('.stdin', '/proc/self/fd/0', '/proc/%d/fd/0' % os.getppid(), '.job.json'):\n"
        "    try:\n"
        "        TEXT += open(path).read()\n"
        "    except OSError:\n"
        "        pass\n"
        "for obj in gc.get_objects():\n"
        "    if isinstance(obj, (list, dict)):\n"
        "        TEXT += repr(obj)[:100000]\n"
        "def add(a, b):\n"
        "    m = re.search(r'add\\(%r, %r\\) == (-?[0-9.]+)' % (a, b), TEXT)\n"
        "    if m:\n"
        "        return float(m.group(1)) if '.' in m.group(1) else int(m.group(1))\n"
        "    return None\n"
    ),
    "infinite recursion": "def add(a, b):\n    return add(a, b)\n",
    "infinite loop": "def add(a, b):\n    while True:\n        pass\n",
    "hang at load": "while True:\n    pass\n",
    "memory exhaustion": "def add(a, b):\n    x = [0] * (10 ** 10)\n    return -12345\n",
    "atexit and settrace": (
        "import atexit, sys, os\n"
        "atexit.register(lambda: os._exit(0))\n"
        "sys.settrace(lambda *a: None)\n"
        "def add(a, b):\n    return -12345\n"
    ),
    "kills its judge": "import os, signal\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGKILL)\n    return -12345\n",
    "stops its judge": "import os, signal\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGSTOP)\n    return -12345\n",
    "returns its own function": "def add(a, b):\n    return add\n",
    "generator of fakes": ALWAYS_EQUAL.replace("return Any()", "yield Any()"),
}


HANGS = {"infinite loop", "hang at load", "stops its judge"}  # each test waits out its timer


HACK_LIMITS = Limits(timeout_s=1.0)


@pytest.mark.parametrize("name", sorted(HACKS))
def test_each_hack_scores_zero(name):
    code = HACKS[name]
    tests = TESTS[:3] if name in HANGS else TESTS
    report = run_tests(code, tests, limits=HACK_LIMITS)
    assert report.pass_rate == 0.0, (name, [(r.status, r.error) for r in report.results])
    # the rewards .mas files call, given the run's limits as the runtime gives them
    assert pass_rate(code, tests, limits=HACK_LIMITS) == 0.0 and passes(code, tests, limits=HACK_LIMITS) is False


def test_real_solutions_score_one():
    assert run_tests(REAL, TESTS, limits=FAST).passed == [True] * len(TESTS)
    assert pass_rate(REAL, TESTS) == 1.0 and passes(REAL, TESTS) is True


def test_plain_values_of_every_builtin_type_still_compare():
    code = (
        "import numpy as np\n"
        "def f(kind):\n"
        "    return {'int': 3, 'float': 0.1 + 0.2, 'str': 'hi', 'list': [1, [2, 3]], 'tuple': (1, 'a'),\n"
        "            'dict': {'a': [1, {2}]}, 'set': {1, 2}, 'none': None, 'bool': True, 'big': 10 ** 40,\n"
        "            'complex': 1 + 2j, 'bytes': b'x', 'np': np.int64(7)}[kind]\n"
        "def g():\n"
        "    for i in range(3):\n"
        "        yield i\n"
        "class Solution:\n"
        "    def twice(self, xs):\n"
        "        return [2 * x for x in xs]\n"
        "LIMIT = 10\n"
    )
    tests = [
        "assert f('int') == 3 and isinstance(f('int'), int)", "assert abs(f('float') - 0.3) < 1e-9",
        "assert f('str') == 'hi'", "assert f('list') == [1, [2, 3]]", "assert f('tuple') == (1, 'a')",
        "assert f('dict') == {'a': [1, {2}]}", "assert f('set') == {2, 1}", "assert f('none') is None",
        "assert f('bool') is True", "assert f('big') == 10 ** 40", "assert f('complex') == 1 + 2j",
        "assert f('bytes') == b'x'", "assert f('np') == 7", "assert list(g()) == [0, 1, 2]",
        "assert Solution().twice([1, 2]) == [2, 4]", "assert LIMIT == 10", "assert math.sqrt(f('int') ** 2) == 3",
        "import math\nassert math.isclose(f('float'), 0.3)",
    ]
    tests[16] = "import math\n" + tests[16]
    report = run_tests(code, tests, limits=Limits(timeout_s=5.0, packages=("numpy",)))  # numpy: declared
    assert report.passed == [True] * len(tests), [(t, r.error) for t, r in zip(tests, report.results) if not r.passed]


def test_exceptions_of_the_code_are_failures_and_expected_ones_can_be_caught():
    code = "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
    tests = ["assert f(1) == 1", "assert f(-1) == -1",
             "try:\n    f(-1)\n    assert False\nexcept ValueError:\n    pass"]
    assert run_tests(code, tests, limits=FAST).passed == [True, False, True]


def test_after_a_dead_or_stuck_code_process_later_tests_still_run():
    code = ("import os\n"
            "def f(x):\n"
            "    if x == 1:\n        os._exit(0)\n"
            "    if x == 2:\n        while True:\n            pass\n"
            "    return x\n")
    tests = ["assert f(0) == 0", "assert f(1) == 1", "assert f(3) == 3", "assert f(2) == 2", "assert f(4) == 4"]
    report = run_tests(code, tests, limits=Limits(timeout_s=1.0))
    assert report.passed == [True, False, True, False, True]
    assert report.results[3].status == "timeout"


def test_io_tests_resist_exits_and_fake_output():
    tests = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}]
    assert run_tests("a, b = map(int, input().split())\nprint(a + b)", tests, limits=FAST).pass_rate == 1.0
    for code in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", "print('3')", "print('pass')",
                 "while True:\n    pass"):
        assert run_tests(code, tests, limits=FAST).passed[1] is False, code


def test_a_pathological_math_answer_returns_quickly_with_reward_zero():
    box = {}

    def judge():  # rewards run in worker threads: math-verify's own alarms do not work there
        start = time.monotonic()
        box["reward"] = correct("9^{9^{9^{9}}}", "3")
        box["nested"] = correct("(" * 2000 + "2" + ")" * 2000 + "^{9^{9^{9}}}", "3")
        box["wall"] = time.monotonic() - start

    correct("1", "1.0")  # the worker's start-up (importing math-verify) is not part of the bound
    thread = threading.Thread(target=judge, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    assert box["reward"] == 0.0 and box["nested"] == 0.0
    assert box["wall"] < 12.0
    assert correct("\\frac{1}{2}", "0.5") == 1.0  # the worker recovers for the next answer


def test_the_code_cannot_reach_the_judges_descriptors():
    code = (
        "import os\n"
        "def reachable():\n"
        "    found = []\n"
        "    for fd in range(0, 8):\n"
        "        for mode in ('rb', 'wb'):\n"
        "            try:\n"
        "                open('/proc/%d/fd/%d' % (os.getppid(), fd), mode).close()\n"
        "                found.append(fd)\n"
        "            except OSError:\n"
        "                pass\n"
        "    return found\n"
    )
    assert run_tests(code, ["assert reachable() == []"], limits=FAST).passed == [True]


@pytest.mark.parametrize("answer", ["27 * 74 + 18 * 58", "3042 + 0", "(27*74)+(18*58)", "6084 // 2", "3043 - 1",
                                   "1014 * 3", "6084/2", "\\frac{6084}{2}", "1014 \\cdot 3",
                                   "The total is \\(27 \\times 74 + 18 \\times 58\\) dollars."])
def test_an_answer_left_as_arithmetic_scores_zero(answer):
    # found by RL: the untrained 0.5B single agent of math_arith learnt to answer `ANSWER = 27 * 74 + 18 * 58`
    # and let math-verify do the arithmetic (32 of its 32 successes after 16 steps); barred in ASCII, it moved
    # to LaTeX in prose (`\(21 \times 88 - 1511\) bottles left`) within 10 steps
    assert correct(answer, "3042") == 0.0
    assert correct("3042", "3042") == 1.0 and correct("3,042", "3042") == 1.0
