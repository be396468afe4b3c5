"""A run folder's own copy of every file its workflow reads, so the folder works alone.

When a run folder is made (`masdsl.runtime.rundir.RunDir.open`), `keep` copies the `.mas`
source and every local file it names: each `import "x.py"` (and, recursively, the local Python
modules such a file imports: `import helper` of a `helper.py` beside it), each quoted data
file (`data train "tasks.jsonl"`) and each `prompt file "p.j2"`. They go under `files/` at the
same places relative to the `.mas` as the originals (a `../shared/x.py` stays one folder up),
so the copy loads exactly as the original did and means the same (`masdsl.lang.fingerprint`).
`files.json` lists each with its sha256:

    {"workflow": "files/quiz.mas", "original": "/home/me/quiz.mas",
     "files": [{"kind": "import", "written": "quiz_env.py", "path": "files/quiz_env.py",
                "original": "/home/me/quiz_env.py", "sha256": "...", "bytes": 1234}, ...]}

`load` (`masdsl export RUN_DIR`, `masdsl eval --checkpoint RUN_DIR`) compiles the workflow from
those copies, after checking every hash: a copy edited since is refused, naming the file. A file
named by an absolute path is not copied (the workflow reads it where it says); its hash is kept
and checked all the same. Run folders made before `files.json` existed load from their
`workflow.mas` as before.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> _ = (d / "helper.py").write_text("X = 1\\n")
>>> _ = (d / "env.py").write_text("import json, helper\\nfrom helper import X\\n")
>>> [p.name for p in local_modules(d / "env.py")]
['helper.py']
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from masdsl import lang
from masdsl.errors import UserError
from masdsl.lang import ast as A
from masdsl.lang.parse import parse_text
from masdsl.lang.workflow import Workflow

MANIFEST = "files.json"
FILES = "files"


@dataclass(frozen=True)
class Ref:
    """One file a workflow reads: what kind, the path as the `.mas` wrote it, the file itself."""

    kind: str  # "import", "module" (imported by an imported file), "data" or "prompt"
    written: str
    path: Path


def sha256(path: Path) -> str:
    """The file's sha256, read in blocks (data files can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def references(workflow: Workflow) -> list[Ref]:
    """The local files `workflow` reads, in the order the source names them (then the Python
    modules its imports import). A reference to a missing file is left out: the checker has
    already refused it, or it belongs to a source that no longer exists (a copy's copy)."""
    module, _ = parse_text(workflow.source or "", str(workflow.path or "<string>"))
    if module is None:
        return []
    base = Path(workflow.path).parent if workflow.path else Path.cwd()
    written = [("import", i.path.value) for i in module.imports]
    written += [("data", d.path.value) for d in module.data if d.path is not None]
    written += [("prompt", p.text.value) for r in module.roles for p in r.of(A.RolePrompt) if p.file]
    refs, seen = [], set()
    for kind, text in written:
        path = Path(os.path.normpath(base / text))
        if path.is_file() and path not in seen:
            seen.add(path)
            refs.append(Ref(kind, text, path))
    todo = [r.path for r in refs if r.kind == "import"]
    while todo:  # the local modules imported files import, and theirs
        for path in local_modules(todo.pop()):
            if path not in seen:
                seen.add(path)
                refs.append(Ref("module", os.path.relpath(path, base), path))
                todo.append(path)
    return refs


def local_modules(py: Path) -> list[Path]:
    """The Python files beside `py` that it imports (`import helper`, `from pkg import mod`);
    standard and installed modules are not beside it and so not listed. A file that does not
    parse lists nothing (its import already failed with its own error)."""
    try:
        tree = ast.parse(py.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    found: list[Path] = []
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            stem = py.parent.joinpath(*parts[:i])
            for path in (stem.with_suffix(".py"), stem / "__init__.py"):
                if path.is_file() and path != py and path not in found:
                    found.append(path)
    return found


def keep(run_dir: Path, workflow: Workflow) -> Path:
    """Copy the workflow's source and local files under `run_dir/files/`; write `files.json`."""
    run_dir = Path(run_dir)
    base = Path(workflow.path).parent.resolve() if workflow.path else Path.cwd()
    refs = [Ref(r.kind, r.written, r.path.resolve()) for r in references(workflow)]
    local = [r for r in refs if not Path(r.written).is_absolute()]
    root = Path(os.path.commonpath([base, *(r.path for r in local)]))
    mas = run_dir / FILES / base.relative_to(root) / (Path(workflow.path).name if workflow.path else
                                                     f"{workflow.name}.mas")
    mas.parent.mkdir(parents=True, exist_ok=True)
    mas.write_text(workflow.source or "", encoding="utf-8")
    rows = []
    for r in refs:
        row = {"kind": r.kind, "written": r.written, "original": str(r.path), "sha256": sha256(r.path),
               "bytes": r.path.stat().st_size}
        if r in local:
            copy = run_dir / FILES / r.path.relative_to(root)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(r.path, copy)
            row["path"] = copy.relative_to(run_dir).as_posix()
        rows.append(row)
    manifest = {"workflow": mas.relative_to(run_dir).as_posix(), "sha256": sha256(mas),
                "original": str(workflow.path.resolve()) if workflow.path else None, "files": rows}
    (run_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return mas


def verify(run_dir: Path) -> Path:
    """Check every kept file against its recorded sha256; the `.mas` copy to load. A UserError
    names the first file that is missing or differs."""
    run_dir = Path(run_dir)
    try:
        manifest = json.loads((run_dir / MANIFEST).read_text(encoding="utf-8"))
        mas = run_dir / manifest["workflow"]
        rows = [{"path": manifest["workflow"], "sha256": manifest["sha256"]}, *manifest["files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{run_dir / MANIFEST}: unreadable ({exc}); name the workflow file with --workflow FILE") from None
    for row in rows:
        path = run_dir / row["path"] if "path" in row else Path(row["original"])
        where = "kept in the run folder" if "path" in row else "named by an absolute path, read where it is"
        if not path.is_file():
            raise UserError(f"{path}: missing ({where}); the run folder's {MANIFEST} records it with "
                            f"sha256 {row['sha256'][:12]}")
        now = sha256(path)
        if now != row["sha256"]:
            raise UserError(f"{path}: changed since the run started ({where}): sha256 {now[:12]}, recorded "
                            f"{row['sha256'][:12]} in {run_dir / MANIFEST}; restore it, or name the workflow "
                            "to use with --workflow FILE")
    return mas


def load(run_dir: Path) -> Workflow | None:
    """The workflow of a run folder, compiled from its own copies (`verify`d first); None for a
    folder made before copies were kept (no `files.json`)."""
    if not (Path(run_dir) / MANIFEST).is_file():
        return None
    return lang.load(verify(run_dir))
