"""Checker rule for the `sandbox { }` statement: what generated programs may use
([invalid-sandbox], docs/errors.md). It takes the keys of the run configuration's `sandbox`
section (`masdsl.config.SandboxConfig`: `packages`, and the limits `timeout_s`, `memory_mb`,
...); each declared package must be installed in masdsl's own Python, since the sandbox binds
it from there (`masdsl.sandbox.visible`).

>>> from masdsl.lang.parse import parse_text
>>> from masdsl.lang.context import Ctx
>>> text = 'sandbox { packages: ["numpy", "nump"], timeot_s: 2 }'
>>> module, _ = parse_text(text, "w.mas")
>>> c = Ctx(module, text, None, None)
>>> check_sandbox(c)
>>> [(d.message, str(d.span)) for d in c.diags]  # doctest: +NORMALIZE_WHITESPACE
[("package `nump` is not installed in masdsl's Python", 'w.mas:1:31'),
 ('unknown sandbox key `timeot_s` (did you mean `timeout_s`?)', 'w.mas:1:40')]
"""

from __future__ import annotations

import dataclasses

from masdsl.config import ConfigError, plainly_valid, resolve_config
from masdsl.config_schema import SandboxConfig
from masdsl.errors import did_you_mean
from masdsl.lang import ast as A
from masdsl.lang.context import Ctx
from masdsl.sandbox.visible import package_problem

KEYS = tuple(f.name for f in dataclasses.fields(SandboxConfig))
CODE = "invalid-sandbox"


def check_sandbox(c: Ctx) -> None:
    """At most one `sandbox { }`; known keys; `packages` a list of installed packages (here or in
    `train { sandbox { } }`); the limits of the types the configuration takes; no key set in both."""
    decls = c.module.sandboxes
    nested = c.module.trains[0].block.get("sandbox") if c.module.trains else None
    if nested is not None and isinstance(nested.value, A.Block) and nested.value.get("packages") is not None:
        _check_packages(c, nested.value.get("packages"))  # `train { sandbox { packages } }` binds them alike
    for dup in decls[1:]:
        c.error("duplicate-statement", "`sandbox` is declared twice", dup.span, label="second `sandbox`",
                related=((decls[0].span, "first `sandbox` here"),), help="keep one `sandbox` statement")
    if not decls:
        return
    block = decls[0].block
    limits = {}
    for entry in block.entries:
        key = entry.key.name
        if key not in KEYS:
            hint = did_you_mean(key, KEYS)
            c.error(CODE, f"unknown sandbox key `{key}`" + (f" ({hint})" if hint else ""), entry.key.span,
                    help=f"the keys are {', '.join(KEYS)}")
        elif nested is not None and isinstance(nested.value, A.Block) and nested.value.get(key) is not None:
            c.error(CODE, f"`{key}` is set twice: here and in `train {{ sandbox {{ }} }}`", entry.key.span,
                    related=((nested.value.get(key).key.span, "also set here"),), help="keep one of them")
        elif key == "packages":
            _check_packages(c, entry)
        else:
            limits[key] = entry
    _check_limits(c, limits)


def _check_packages(c: Ctx, entry: A.Entry) -> None:
    items = entry.value.items if isinstance(entry.value, A.ListValue) else None
    if items is None or not all(isinstance(i, A.Value) and isinstance(i.value, str) for i in items):
        c.error(CODE, "`packages` must be a list of package names", entry.value.span,
                help='write the names `import` takes, for example `packages: ["numpy"]`')
        return
    for item in items:
        problem = package_problem(item.value)
        if problem is not None:
            c.error(CODE, problem, item.span, label="not available to programs",
                    help=_package_help(item.value, problem))


def _package_help(name: str, problem: str) -> str:
    if "standard library" in problem:
        return f"remove `{name}`: the standard library is always there"
    if "not installed" in problem:
        import pkgutil  # lazy: only a mistake lists the installed modules

        hint = did_you_mean(name, [m.name for m in pkgutil.iter_modules() if not m.name.startswith("_")])
        install = f"install it into the Python that runs masdsl (`pip install {name}`)"
        if hint:
            return f"{hint} Or {install}"
        return f"{install}, or remove it: the sandbox binds each declared package from there"
    return 'write the name `import` takes, for example `packages: ["numpy"]`'


def _check_limits(c: Ctx, limits: dict[str, A.Entry]) -> None:
    """The limits set here, as the configuration's schema takes them (only a mistake costs OmegaConf)."""
    if not limits:
        return
    values = {"sandbox": {k: A.to_python(e.value) for k, e in limits.items()}}
    if plainly_valid(values):
        return
    try:
        resolve_config(train_block=values)
    except ConfigError as exc:
        key = (exc.key or "").split(".")[-1]
        entry = limits.get(key)
        c.error(CODE, str(exc).strip().splitlines()[0], entry.value.span if entry else next(iter(limits.values())).span)
