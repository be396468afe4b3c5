"""The layout rules of docs/architecture.md, checked on the source tree.

- no module under `masdsl/` over 400 lines;
- no function over 60 lines unless its body opens with a `# long: <reason>` comment;
- imports at the top of modules: an import inside a function carries a comment saying why (on
  its line, the line above, or one line of the block of imports it opens), e.g. `# heavy: torch`,
  and no more than `MAX_FUNCTION_LEVEL_IMPORTS` of them import masdsl modules;
- no import circles between masdsl modules, and no arrow from a lower layer up to a higher one;
- nothing under `masdsl/plan/` imports torch, transformers, vllm, ray or `masdsl.envs`, at its top
  or in a function; `masdsl.models` imports no masdsl module but `masdsl.errors`;
- docstrings and comments point only at `.md` files that exist;
- parameters annotated plain `Any` do not grow past `MAX_BARE_ANY_PARAMETERS`, and no `env`, `cfg`
  or `workflow` below the commands is one.
"""

from __future__ import annotations

import ast
import re

import networkx as nx
import pytest

from masdsl.testing.layout import (LAYERS, MAX_FUNCTION_LINES, MAX_MODULE_LINES, ROOT, import_graph, imported_names,
                                   imports_of, layer_of, modules, parsed, unexplained_long_functions)
from masdsl.testing.lazy_imports import function_level_imports
from masdsl.testing.typing_figures import bare_any_by_file, bare_any_params, seam_any_params

MODULES = modules()
TREES = {m: parsed(m) for m in MODULES}


def test_no_module_over_the_line_limit():
    big = {m: len(lines) for m, (_, lines) in TREES.items() if len(lines) > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}"


def _functions():
    """(module, source lines, function node) for every function of masdsl."""
    for module, (tree, lines) in TREES.items():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield module, lines, fn


def test_long_functions_say_why():
    unexplained = [f"{module}.{name} ({n} lines)" for module, (tree, lines) in TREES.items()
                   for name, n in unexplained_long_functions(tree, lines)]
    assert not unexplained, f"functions over {MAX_FUNCTION_LINES} lines with no `# long:` reason: {unexplained}"


def _explained(lines: list[str], lineno: int) -> bool:
    """Whether the import at `lineno` (1-based), or the block of imports it belongs to, has a comment."""
    i = lineno - 1
    while i >= 0:
        text = lines[i].strip()
        if "#" in text:
            return True
        if not (text == "" or text.startswith(("import ", "from ")) or text.endswith((",", "(")) or text == ")"):
            return False
        i -= 1
    return False


def test_imports_inside_functions_say_why():
    silent = []
    for module, lines, fn in _functions():
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not _explained(lines, node.lineno):
                silent.append(f"{MODULES[module].relative_to(ROOT)}:{node.lineno}")
    assert not silent, f"imports inside functions with no comment saying why: {sorted(set(silent))}"


# masdsl modules imported inside functions (91 before the light/body split of the commands): the
# rest are start-up or optional-dependency reasons; lower it when one goes, never raise it
MAX_FUNCTION_LEVEL_IMPORTS = 15


def test_masdsl_imports_stay_at_the_top():
    """A module's masdsl dependencies are read from its top (docs/architecture.md, "Light and body
    modules"); `python -m masdsl.testing.lazy_imports -v` lists the imports still in functions."""
    found = function_level_imports()
    assert 0 < len(found) <= MAX_FUNCTION_LEVEL_IMPORTS, (
        f"{len(found)} imports of masdsl modules inside functions (at most {MAX_FUNCTION_LEVEL_IMPORTS}): "
        f"import at the module's top, or split a command into light and body modules: {found}")


def test_no_import_circles():
    cycles = [c for c in nx.simple_cycles(import_graph())]
    assert not cycles, f"import circles: {cycles[:10]}"


def test_no_arrow_back_up():
    upward = [(a, b) for a, b in import_graph().edges if layer_of(b) > layer_of(a)]
    assert not upward, f"imports from a lower layer into a higher one: {upward}"


# The plan decides and executes nothing: it loads no model, starts no engine or Ray, builds no env
# (loading is `masdsl.models`, envs and data `masdsl.runtime.inputs`), so a dry run stays light.
PLAN_NEVER_IMPORTS = ("torch", "transformers", "vllm", "ray", "masdsl.envs")


def _forbidden_in_plan(module: str, tree: ast.Module) -> list[str]:
    is_package = MODULES.get(module, ROOT / "x.py").name == "__init__.py"
    return sorted({f"{module}:{line} {name}" for line, name in imported_names(module, tree, is_package)
                   if any(name == bad or name.startswith(bad + ".") for bad in PLAN_NEVER_IMPORTS)})


def test_the_plan_imports_no_executor():
    plan_modules = [m for m in MODULES if m == "masdsl.plan" or m.startswith("masdsl.plan.")]
    assert len(plan_modules) >= 8, plan_modules
    found = [hit for m in plan_modules for hit in _forbidden_in_plan(m, TREES[m][0])]
    assert not found, f"masdsl/plan imports what executes (at the top or in a function): {found}"


@pytest.mark.parametrize("source", [
    "import torch", "import torch.nn as nn", "from transformers import AutoModel",
    "def f():\n    import vllm  # heavy", "def f():\n    from ray import get",
    "from masdsl.envs.base import Env", "from masdsl import envs", "from ..envs import registry",
    "if TYPE_CHECKING:\n    import torch", "def f():\n    importlib.import_module('ray')",
])
def test_the_plan_import_check_sees_every_form(source):
    assert _forbidden_in_plan("masdsl.plan.fake", ast.parse(source))


def test_the_plan_import_check_lets_the_plan_decide():
    # the plan names models through the ground floor, and reads the config and the workflow
    source = "from masdsl.models.names import model_problem\nfrom masdsl.lang.workflow import Workflow\nimport networkx"
    assert _forbidden_in_plan("masdsl.plan.fake", ast.parse(source)) == []


def test_the_models_package_stands_on_the_ground_floor():
    """`masdsl.models` imports no masdsl module but `masdsl.errors` (and its own), so the plan can
    name a model and the runtime and the learner load one without reaching through each other."""
    found = sorted({f"{m}:{line} {name}" for m in MODULES if m.startswith("masdsl.models")
                    for line, name in imported_names(m, TREES[m][0], MODULES[m].name == "__init__.py")
                    if name.split(".")[0] == "masdsl" and name != "masdsl"
                    and not name.startswith(("masdsl.errors", "masdsl.models"))})
    assert not found, f"masdsl.models imports masdsl modules above the ground floor: {found}"


@pytest.mark.parametrize("source", ["import masdsl", "from masdsl import load", "from .. import load"])
def test_an_import_of_a_parent_package_is_an_edge_the_layers_see(source):
    # `masdsl/__init__.py` reaches the API (and so the trainer) lazily: a learner module importing
    # the root package closes the loop learner -> masdsl -> api -> learner, which the layer rule
    # must see although `masdsl` is a parent of the importer (a fake module, so main stays clean).
    fake = "masdsl.learner.fake_importer"
    known = {**MODULES, fake: ROOT / "masdsl" / "learner" / "fake_importer.py"}
    edges = {(fake, target) for target in imports_of(fake, ast.parse(source), known)}
    assert (fake, "masdsl") in edges
    assert [e for e in edges if layer_of(e[1]) > layer_of(e[0])] == [(fake, "masdsl")]


def test_no_subpackage_shadows_an_api_name():
    # importing `masdsl.train.x` would set `masdsl.train` to the package, and `masdsl.train(...)` breaks
    import masdsl

    clashes = [m for m in MODULES if m.count(".") == 1 and m.split(".")[1] in masdsl.__all__]
    assert not clashes, f"subpackages named like the API's functions: {clashes}"


def test_an_import_of_its_own_package_stays_in_its_layer():
    edges = imports_of("masdsl.lang.parse", ast.parse("from masdsl.lang import load"), MODULES)
    assert edges == {"masdsl.lang"} and layer_of("masdsl.lang") == layer_of("masdsl.lang.parse")


@pytest.mark.parametrize("module", ["masdsl.envs.registry", "masdsl.runtime.executor", "masdsl.commands.run"])
def test_layer_of_places_known_modules(module):
    assert 0 <= layer_of(module) < len(LAYERS)
    assert layer_of("masdsl.errors") < layer_of("masdsl.lang.parse") < layer_of("masdsl.training.trainer")


def test_doc_references_exist():
    missing = []
    for module, (_, lines) in TREES.items():
        for lineno, line in enumerate(lines, 1):
            for quote, ref in re.findall(r"([\"']?)([\w./-]+\.md)\b", line):
                if quote and line[line.index(quote + ref) + len(quote + ref):].startswith(quote):
                    continue  # a string literal: a file the program writes (a run's "comparison.md")
                name = ref.lstrip("./")
                if "/" in name and not name.startswith("docs/"):
                    continue  # a path inside a run folder, not a repository file
                if not any((ROOT / base / name).is_file() for base in ("", "docs")):
                    missing.append(f"{MODULES[module].relative_to(ROOT)}:{lineno} {ref}")
    assert not missing, f"references to files that are not in the repository: {missing}"


def _dotted_names(text: str) -> set[str]:
    return set(re.findall(r"`(masdsl(?:\.\w+)+)(?:\(\))?`", text))


def test_architecture_doc_names_exist():
    """Every function, class and module docs/architecture.md names is there under that name."""
    import importlib

    doc = (ROOT / "docs" / "architecture.md").read_text()
    names = _dotted_names(doc)
    assert len(names) >= 15, names
    missing = []
    for name in sorted(names):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(name)
            break
        else:
            missing.append(name)
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"


CAPABILITIES = {"takes_refs", "model", "base", "sleep", "wake_up", "adapter", "tokenizer"}


def _engine_like(node: ast.expr) -> bool:
    """`engine`, `e`, `eng`, `self.engine`, `engines[name]`, ...: what holds an `Engine` here."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value if isinstance(node, ast.Subscript) else node
        if isinstance(node, ast.Attribute):
            if "engine" in node.attr:
                return True
            node = node.value
    return isinstance(node, ast.Name) and (node.id in ("e", "eng") or "engine" in node.id)


# issue 30 item 6: 353 before the seams were typed. Lower it as you type more; never raise it.
MAX_BARE_ANY_PARAMETERS = 133


def test_bare_any_parameters_do_not_grow():
    n = bare_any_params()
    assert n <= MAX_BARE_ANY_PARAMETERS, (
        f"{n} parameters are annotated plain `Any` (at most {MAX_BARE_ANY_PARAMETERS}): give the new ones their "
        f"type (`Env`, `Workflow`, `torch.Tensor`, `Mapping[str, Any]`, `object`...); the most: "
        f"{bare_any_by_file().most_common(5)} (`python -m masdsl.testing.typing_figures`)")


def test_the_seams_are_typed():
    """`env: Env`, `cfg: Config` (or its section), `workflow: Workflow` below the commands."""
    assert seam_any_params() == {"env": 0, "cfg": 0, "workflow": 0}


def test_no_getattr_probes_on_engines():
    """Engine capabilities are declared on `Engine` with defaults (`masdsl.runtime.backends.base`)."""
    probes = []
    for module, (tree, _) in TREES.items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in CAPABILITIES and _engine_like(node.args[0])):
                probes.append(f"{MODULES[module].relative_to(ROOT)}:{node.lineno}")
    assert not probes, f"getattr/hasattr probes of engine capabilities: {probes}"


def test_no_getattr_probes_on_policies():
    """What a `Policy` has is declared on it (`masdsl.learner.policies.Policy`, `compute_dtype` with
    its default): callers read the attribute instead of guessing with `getattr(policy, ...)`."""
    (cls,) = [n for n in ast.walk(TREES["masdsl.learner.policies"][0]) if isinstance(n, ast.ClassDef) and n.name == "Policy"]
    fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert {"compute_dtype", "adapter", "model_path"} <= fields, fields
    probes = [f"{MODULES[module].relative_to(ROOT)}:{node.lineno}" for module, (tree, _) in TREES.items()
              for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in fields
              and "polic" in ast.unparse(node.args[0])]
    assert not probes, f"getattr/hasattr probes of a policy's declared attributes: {probes}"


# Where `cfg.policy` / `cfg.sample` may be touched: the config layer that defines and resolves them
# (`policy_override`, the name check) and the plan's builder. Everyone else reads the plan's answer
# (a checkpoint's models go in with `RunPlan.with_policies`).
OVERRIDE_OWNERS = {"masdsl.config", "masdsl.plan.run_plan"}


def test_only_the_plan_and_config_read_policy_and_sample_overrides():
    readers = []
    for module, (tree, _) in TREES.items():
        if module in OVERRIDE_OWNERS:
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in ("policy", "sample")
                    and isinstance(node.value, (ast.Name, ast.Attribute))
                    and (node.value.id if isinstance(node.value, ast.Name) else node.value.attr) in ("cfg", "config")):
                readers.append(f"{MODULES[module].relative_to(ROOT)}:{node.lineno}")
    assert not readers, f"`cfg.policy`/`cfg.sample` read outside the plan's builder: {readers}"


# The consumers of a run's configuration: each takes the `RunPlan` (`masdsl.plan.run_plan`), never a
# `Config`, so what runs is what the plan says (module, function, the parameter that holds the plan).
PLAN_CONSUMERS = [
    ("masdsl.runtime.engine_factory", "build_engines", "plan"),
    ("masdsl.runtime.executor", "rollout", "plan"),
    ("masdsl.plan.gpu_plan", "recipe_from_plan", "plan"),
    ("masdsl.training.session", "open_session", "plan"),
    ("masdsl.learner.policies", "load_policies", "plan"),
    ("masdsl.training.step", "collect", "plan"),
    ("masdsl.training.evaluation", "evaluate", "plan"),
    ("masdsl.learner.learners", "open_learners", "plan"),
    ("masdsl.training.display", "role_budgets", "plan"),
    ("masdsl.training.trainer", "train", "plan"),
    ("masdsl.training.evaluation", "run_evaluation", "plan"),
    ("masdsl.training.warm_start", "warm_start", "plan"),
    ("masdsl.training.export", "export_final", "plan"),
    ("masdsl.runtime.rundir", "open", "plan"),
]


@pytest.mark.parametrize("module, function, parameter", PLAN_CONSUMERS)
def test_the_consumers_take_the_run_plan(module, function, parameter):
    tree, _ = TREES[module]
    (fn,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function]
    args = {a.arg: a.annotation for a in fn.args.args + fn.args.kwonlyargs}
    assert parameter in args and ast.unparse(args[parameter]) == "RunPlan", (module, function, ast.unparse(fn.args))
    assert not [a for a, ann in args.items() if ann is not None and ast.unparse(ann) == "Config"], (module, function)


def test_only_the_plan_computes_the_effective_policies():
    callers = sorted(m for m, (tree, _) in TREES.items() if m != "masdsl.plan.run_plan" and any(
        isinstance(n, ast.Name) and n.id in ("effective_policies", "role_sample") for n in ast.walk(tree)))
    assert not callers, f"modules that re-derive the policies or sampling instead of reading the plan: {callers}"


def test_the_runtime_and_learner_call_the_registry_the_workflow_carries():
    """The checker's registry reaches the run through the compiled workflow (`Workflow.registry`,
    the specs bound into each `CompiledExpr`, `ParseSpec.empty`): below the front end, no module
    reads the process-wide `REGISTRY`."""
    readers = sorted(f"{MODULES[m].relative_to(ROOT)}:{n.lineno}" for m, (tree, _) in TREES.items()
                     if m.startswith(("masdsl.runtime", "masdsl.learner")) for n in ast.walk(tree)
                     if isinstance(n, (ast.Name, ast.Attribute, ast.alias))
                     and "REGISTRY" in (getattr(n, "id", None), getattr(n, "attr", None), getattr(n, "name", None)))
    assert not readers, f"runtime/learner modules reading the global registry: {readers}"
