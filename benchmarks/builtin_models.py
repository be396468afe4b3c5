"""The built-in `qwen2.5-coder-0.5b-instruct`: conversion, load and generation cost, and whether
tying its `lm_head` to `embed_tokens` is harmless.

    .venv/bin/python benchmarks/builtin_models.py [--reconvert] [--boards 6] [--max-tokens 64] [--no-doc]

The converted GGUF keeps `lm_head` apart from `embed_tokens` (two quantizations of one matrix).
On 8 fixed prompts (the tool prompt of workflows/plan_path.mas on `--boards` 5x5 eval boards, then
coding prompts) the untied model generates greedily, then the same model with its head tied
to the embeddings does. Reported: the mean per-token log-likelihood of the untied model's
greedy outputs under both heads, how often the tied head's top-1 token agrees along those
outputs, and how many outputs are identical. Tying counts as harmless when all outputs agree
and the log-likelihood moves by under 0.01 nats per token. `--reconvert` times a fresh
conversion into a temporary cache (the user's cache is left as it is). Writes the section
`## built-in models` of docs/performance.md unless `--no-doc`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from perf_doc import DOC, machine, replace_section, update  # noqa: E402

CODING = [
    "Write a Python function is_prime(n) that returns True when n is a prime number.",
    "Write a Python function that returns the longest common prefix of a list of strings.",
]


def _prompts(tok, boards: int) -> list[list[int]]:
    import masdsl
    from masdsl.config import resolve_config
    from masdsl.runtime.prompts import encode, messages_for, prompt_variables
    from masdsl.runtime.inputs import prepare

    text = (ROOT / "workflows" / "plan_path.mas").read_text()
    text, found = re.subn(r'plan_path\("eval"[^)]*\)', f'plan_path("eval", n={boards}, size=5)', text)
    assert found == 1, "workflows/plan_path.mas: no `data eval plan_path(\"eval\", ...)` line"
    wf = masdsl.loads(text, name="builtin_models", base_dir=ROOT / "workflows")
    cfg = resolve_config(wf.train, overrides=["tracking.enabled=false"])
    env, data = prepare(wf, cfg.sandbox)
    role = wf.roles["tool"]
    out = []
    for task in data["eval"][:boards]:
        variables = prompt_variables(task, env.view(env.reset(task)), 0, "tool", {}, [])
        out.append(encode(tok, messages_for(role.prompt, role.system, variables, "tool"), max_tokens=4096)[0])
    for text in CODING[: 8 - len(out)]:
        out.append(encode(tok, [{"role": "user", "content": text}], max_tokens=4096)[0])
    return out


def _generate(model, tok, prompts: list[list[int]], max_tokens: int) -> tuple[list[list[int]], float]:
    """Greedy continuations (cut after the first end token) and the wall time of the batch."""
    import torch

    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens, do_sample=False,
                             pad_token_id=tok.pad_token_id)
    wall = time.perf_counter() - t0
    eos = model.generation_config.eos_token_id
    ends = {tok.eos_token_id, *([eos] if isinstance(eos, int) else eos or [])}
    seqs = []
    for row in out[:, width:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in ends), len(row))
        seqs.append(row[:cut])
    return seqs, wall


def _score(model, prompt: list[int], resp: list[int]) -> tuple[list[float], list[int]]:
    """Per-token log-likelihoods of `resp` after `prompt`, and the model's top-1 at each place."""
    import torch

    ids = torch.tensor([prompt + resp])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    lp = torch.log_softmax(logits, -1)
    return lp.gather(1, ids[0, len(prompt):, None]).squeeze(1).tolist(), logits.argmax(-1).tolist()


def _tie(model, tied: bool, untied_head) -> None:
    emb = model.get_input_embeddings().weight
    model.get_output_embeddings().weight = emb if tied else untied_head


def _compare(model, tok, prompts, max_tokens) -> dict:
    untied_head = model.get_output_embeddings().weight
    emb = model.get_input_embeddings().weight
    diff = (untied_head - emb).abs()
    res = {"max_diff": diff.max().item(), "mean_w": emb.abs().mean().item()}
    u, res["untied_s"] = _generate(model, tok, prompts, max_tokens)
    _tie(model, True, untied_head)
    t, res["tied_s"] = _generate(model, tok, prompts, max_tokens)
    tied_scores = [_score(model, p, r) for p, r in zip(prompts, u)]
    _tie(model, False, untied_head)
    untied_scores = [_score(model, p, r) for p, r in zip(prompts, u)]
    n = sum(len(r) for r in u)
    res["tokens"], res["tokens_tied"] = n, sum(len(r) for r in t)
    res["ll_untied"] = sum(sum(s[0]) for s in untied_scores) / n
    res["ll_tied"] = sum(sum(s[0]) for s in tied_scores) / n
    res["top1"] = sum(a == b for (_, top), r in zip(tied_scores, u) for a, b in zip(top, r)) / n
    res["same"] = sum(a == b for a, b in zip(u, t))
    prefix = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), min(len(x), len(y))) for x, y in zip(u, t)]
    res["prefix"] = prefix
    return res


def _timed_conversion(reconvert: bool) -> tuple[Path, float | None]:
    """The cached folder, and the seconds a conversion took (None when it was already cached)."""
    from masdsl.models.load import QWEN, cache_dir, resolve_model

    cached = (cache_dir() / "models" / QWEN / "masdsl_model.json").is_file()
    if reconvert:  # into a temporary cache: the user's stays as it is
        old = os.environ.get("MASDSL_CACHE")
        with tempfile.TemporaryDirectory(prefix="masdsl-convert-") as tmp:
            os.environ["MASDSL_CACHE"] = tmp
            t0 = time.perf_counter()
            resolve_model(QWEN)
            took = time.perf_counter() - t0
        os.environ.pop("MASDSL_CACHE")
        if old is not None:
            os.environ["MASDSL_CACHE"] = old
        return resolve_model(QWEN), took
    t0 = time.perf_counter()
    folder = resolve_model(QWEN)
    return folder, None if cached else time.perf_counter() - t0


def _section(res: dict, args, convert_s: float | None, load_s: float, size_gb: float, tie: bool) -> str:
    harmless = res["same"] == len(res["prefix"]) and abs(res["ll_tied"] - res["ll_untied"]) < 0.01
    conv = f"conversion {convert_s:.0f} s (checks, assembly and GGUF -> fp32), " if convert_s else ""
    verdict = ("tying is harmless on these prompts" if harmless else
               "tying changes the model's outputs, so the head stays untied")
    return (
        "## built-in models\n\n"
        "`qwen2.5-coder-0.5b-instruct` (Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF assembled from six "
        "hash-checked parts, fp32 on CPU, transformers, greedy). Rerun: "
        f"`.venv/bin/python benchmarks/builtin_models.py{' --reconvert' if args.reconvert else ''}`.\n\n"
        f"- {machine()}: {conv}load {load_s:.1f} s, folder {size_gb:.2f} GB; "
        f"{len(res['prefix'])} prompts ({args.boards} plan_path tool prompts on 5x5 eval boards, "
        f"{len(res['prefix']) - args.boards} coding prompts) x at most {args.max_tokens} new tokens in one batch: "
        f"untied {res['tokens']} tokens in {res['untied_s']:.1f} s ({res['tokens'] / res['untied_s']:.1f} tok/s), "
        f"tied {res['tokens_tied']} tokens in {res['tied_s']:.1f} s.\n"
        f"- lm_head vs embed_tokens: max |diff| {res['max_diff']:.4f}, mean |w| {res['mean_w']:.4f}. "
        f"Mean per-token log-likelihood of the untied model's greedy outputs: untied {res['ll_untied']:.4f}, "
        f"tied {res['ll_tied']:.4f} (difference {res['ll_tied'] - res['ll_untied']:+.4f} nats/token); the tied "
        f"head's top-1 token agrees on {100 * res['top1']:.1f} % of those tokens; identical outputs "
        f"{res['same']}/{len(res['prefix'])}; first differing token per prompt {res['prefix']}.\n"
        f"- Verdict: {verdict} (rule: all outputs identical and |difference| < 0.01 nats/token). "
        f"`QWEN_TIE_LM_HEAD` in masdsl/models/load.py is {tie}.\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reconvert", action="store_true", help="time a fresh conversion into a temporary cache")
    ap.add_argument("--boards", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()

    import torch

    from masdsl.models.load import QWEN_TIE_LM_HEAD, load_model

    torch.manual_seed(0)
    folder, convert_s = _timed_conversion(args.reconvert)
    t0 = time.perf_counter()
    model, tok = load_model(folder)
    load_s = time.perf_counter() - t0
    if QWEN_TIE_LM_HEAD:
        print("the cached folder is tied: set QWEN_TIE_LM_HEAD = False to compare", file=sys.stderr)
        return 2
    res = _compare(model, tok, _prompts(tok, args.boards), args.max_tokens)
    size_gb = sum(f.stat().st_size for f in folder.iterdir()) / 1e9
    section = _section(res, args, convert_s, load_s, size_gb, QWEN_TIE_LM_HEAD)
    print(section)
    if not args.no_doc:
        update(DOC, replace_section, "built-in models", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
