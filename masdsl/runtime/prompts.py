"""Role prompts: render the Jinja2 template, apply the chat template, tokenise, check length.

Templates render in an `ImmutableSandboxedEnvironment` with `StrictUndefined`, so a template
can neither mutate the values it reads nor silently print nothing for a missing name.
Variables: `task`, `env` (`Env.view(state)`), `turn`, `role` (the role's name), one variable per
role name holding that role's latest fields (parse results, `output`, `ok`), and `history`
(a list of `{role, turn, output, fields}` for the selected steps so far).

>>> render("Hi {{ task.name }}, turn {{ turn }}", {"task": {"name": "Ada"}, "turn": 0})
'Hi Ada, turn 0'
>>> encode(None, [{"role": "user", "content": "ab"}], max_tokens=100)[0][:4]
[60, 124, 117, 115]
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from masdsl.errors import UserError
from masdsl.lang.templates import environment

if TYPE_CHECKING:
    from jinja2 import Template
    from transformers import PreTrainedTokenizerBase

_FALLBACK_ROLE_PREFIX = "<|{role}|>\n"


class PromptError(UserError):
    """A prompt template failed to render, or a prompt is longer than the limit."""


@lru_cache(maxsize=256)
def _template(source: str) -> Template:
    return environment().from_string(source)  # the checker's environment: what it accepts is what renders


def render(source: str, variables: Mapping[str, Any], where: str = "prompt") -> str:
    """Render one template; any Jinja error becomes a `PromptError` naming `where`."""
    try:
        return _template(source).render(**variables).strip()
    except UserError:
        raise
    except Exception as exc:  # jinja2 TemplateError, UndefinedError, SecurityError, ...
        raise PromptError(f"{where}: the template failed to render: {type(exc).__name__}: {exc}") from None


def prompt_variables(
    task: Mapping[str, Any],
    env_view: Mapping[str, Any],
    turn: int,
    role: str,
    fields: Mapping[str, Mapping[str, Any]],
    history: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The names a role's prompt may use (role names first, so fixed names win a clash)."""
    return {**fields, "task": task, "env": env_view, "turn": turn, "role": role, "history": list(history)}


def messages_for(prompt: str, system: str | None, variables: Mapping[str, Any], where: str) -> list[dict[str, str]]:
    """The chat messages of one role step: an optional system message, then the user prompt."""
    messages = []
    if system:
        messages.append({"role": "system", "content": render(system, variables, f"{where} (system)")})
    messages.append({"role": "user", "content": render(prompt, variables, where)})
    return messages


def chat_text(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], chat_kwargs: Mapping[str, Any] | None = None) -> str:
    """The prompt text: the tokenizer's chat template, or a plain tagged layout without one.

    `chat_kwargs` (the policy's `chat_template_kwargs`, e.g. `{"enable_thinking": False}` for
    Qwen3) are extra variables of the chat template; the tagged layout has none to set.
    Both engines get prompts rendered here (they receive token ids, never text).

    >>> chat_text(None, [{"role": "user", "content": "hi"}])
    '<|user|>\\nhi\\n<|assistant|>\\n'
    """
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        extra = dict(chat_kwargs or {})
        for fixed in ("add_generation_prompt", "tokenize", "conversation", "messages"):
            if fixed in extra:
                raise PromptError(f"chat_template_kwargs may not set `{fixed}` (masdsl sets it)")
        try:
            return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **extra)
        except UserError:
            raise
        except Exception as exc:  # jinja2 errors of the model's own template, bad kwargs
            raise PromptError(f"the chat template failed to render: {type(exc).__name__}: {exc}") from None
    text = "".join(_FALLBACK_ROLE_PREFIX.format(role=m["role"]) + m["content"] + "\n" for m in messages)
    return text + _FALLBACK_ROLE_PREFIX.format(role="assistant")


def text_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of `text` with no special tokens added (UTF-8 bytes without a tokenizer).

    >>> text_ids(None, "é!")
    [195, 169, 33]
    """
    if tokenizer is None:
        return list(text.encode("utf-8"))
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode(
    tokenizer: Any, messages: list[dict[str, str]], *, max_tokens: int, truncate: bool = False, where: str = "prompt",
    chat_kwargs: Mapping[str, Any] | None = None,
) -> tuple[list[int], str, bool]:
    """(ids, text, truncated): the chat-formatted prompt, checked against `max_tokens`.

    Too long is an error unless `truncate`, which keeps the last `max_tokens` ids (the end of
    a prompt holds the instruction and the generation prompt).

    >>> encode(None, [{"role": "user", "content": "x" * 20}], max_tokens=5, truncate=True)[0]
    [110, 116, 124, 62, 10]
    >>> encode(None, [{"role": "user", "content": "x" * 20}], max_tokens=5)
    Traceback (most recent call last):
    ...
    masdsl.runtime.prompts.PromptError: prompt: the prompt has 44 tokens, more than runtime.max_prompt_tokens=5 (raise it, or set runtime.truncate_prompts=true to keep the last 5 tokens)
    """
    try:
        text = chat_text(tokenizer, messages, chat_kwargs)
    except PromptError as exc:
        raise PromptError(f"{where}: {exc}") from None
    ids = text_ids(tokenizer, text)
    if len(ids) <= max_tokens:
        return ids, text, False
    if not truncate:
        raise PromptError(
            f"{where}: the prompt has {len(ids)} tokens, more than runtime.max_prompt_tokens={max_tokens} "
            f"(raise it, or set runtime.truncate_prompts=true to keep the last {max_tokens} tokens)"
        )
    return ids[-max_tokens:], text, True
