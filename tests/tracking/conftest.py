"""Fixtures of the tracking tests: a real `mlflow server` for the session, a small workflow, and
a check that no tracker's system-metrics thread outlives its test.

`mlflow_server` yields a `tests.support.tracking.MlflowServer` (fields `uri`, `port`, `root`;
methods `stop()`, `start()`), started once per session (15-30 s here). A test that stops the
server must start it again before it returns (use `try/finally`). Other test areas can build
their own fixture from `MlflowServer`.
"""

from __future__ import annotations

import pytest

from tests.support.tracking import MlflowServer


@pytest.fixture(autouse=True)
def no_system_metrics_thread_left():
    """A tracker's system metrics thread must end with `finish()`: none may outlive a test."""
    yield
    import threading

    left = [t for t in threading.enumerate() if t.name == "SystemMetricsMonitor" and t.is_alive()]
    for thread in left:  # stop them for the next tests, then fail this one
        thread.join(timeout=30)
    assert not left, "a SystemMetricsMonitor thread outlived its test (a tracker was not finished)"


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow_server")
    server = MlflowServer(root)
    try:
        server.start()
    except RuntimeError:  # e.g. the free port was taken meanwhile: one more try on another
        server = MlflowServer(root)
        server.start()
    try:
        yield server
    finally:
        server.stop()


SMALL_MAS = """workflow {name} "Coder and tester, one policy each."
env code
data train humaneval("train")
data eval  humaneval("eval")
policy writer  {{ model: "smollm2-135m-instruct" }}
policy checker {{ model: "smollm2-135m-instruct" }}

role coder {{
  policy writer
  prompt "Write the function. {{{{ task.prompt }}}}"
  parse code = code_block(output, "python")
  reward pass_rate(code, task.tests)
}}

role tester {{
  policy checker
  prompt "Write asserts for {{{{ task.prompt }}}}"
  parse tests = asserts(output)
  reward pass_rate(task.solution, tests)
}}

flow {{
  max_turns 2
  start -> coder & tester
  coder & tester -> end when passes(coder.code, tester.tests)
  coder & tester -> coder & tester
}}

team pass_rate(coder.code, task.tests)
success passes(coder.code, task.tests)
train {{ samples: 2, batch: 2, steps: 2 }}
"""


def small_workflow(name: str):
    """A compiled two-role workflow: roles coder/tester on policies writer/checker."""
    import masdsl

    return masdsl.loads(SMALL_MAS.format(name=name), name=f"{name}.mas")


@pytest.fixture
def make_workflow():
    """make_workflow(name) -> Workflow with roles coder/tester and policies writer/checker."""
    return small_workflow
