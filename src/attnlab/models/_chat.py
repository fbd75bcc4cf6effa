"""A chat model's prompt: the text as one user message in the checkpoint's chat template,
rendered with Jinja as ``transformers``' ``apply_chat_template`` renders it.

The template is run in Jinja's immutable sandbox with transformers' settings (blocks
trimmed, ``loopcontrols``, ``tojson`` unescaped, ``raise_exception`` and ``strftime_now``)
on ``messages=[{"role": "user", "content": text}]``, the named ``bos_token`` and
``eos_token``, and ``add_generation_prompt=True``; the result is tokenized without adding
special tokens, as transformers tokenizes it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._validation import ArgumentError, MissingDependencyError, fail

if TYPE_CHECKING:
    from ._tokenizer import Tokenizer

__all__ = ["chat_prompt"]


def chat_prompt(tokenizer: Tokenizer, text: str) -> tuple[str, list[bool]]:
    """``text`` as the user's message in ``tokenizer``'s chat template, with the prompt
    for the assistant's answer; and, per token of it, whether the template put it there
    (True) or it is the user's text (False).

    Args:
        tokenizer: a tokenizer with a ``chat_template``.
        text: the user's message.

    Raises:
        ArgumentError: a tokenizer without a chat template, or a template that fails.
        MissingDependencyError: jinja2 is not installed.
    """
    if tokenizer.chat_template is None:
        raise fail("chat", "a chat model (a tokenizer with a chat template)", "a model without one")
    if not isinstance(text, str):
        raise fail("text", "a string", type(text).__name__, TypeError)
    rendered = _render(tokenizer.chat_template, text, tokenizer.bos_token, tokenizer.eos_token)
    start = rendered.rfind(text) if text else -1  # the user's words: their last place (a system prompt comes first)
    end = start + len(text)
    offsets = tokenizer.offsets(rendered)
    template = [start < 0 or b <= start or a >= end for a, b in offsets]
    return rendered, template


def _render(template: str, text: str, bos: str | None, eos: str | None) -> str:
    """The template rendered for one user message and the generation prompt."""
    try:
        from jinja2 import TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise MissingDependencyError("chat: a chat template needs jinja2: pip install 'attnlab[models]'") from None

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda form: datetime.now().strftime(form)
    try:
        return environment.from_string(template).render(
            messages=[{"role": "user", "content": text}], add_generation_prompt=True,
            bos_token=bos or "", eos_token=eos or "",
        )  # fmt: skip
    except TemplateError as error:
        raise ArgumentError(f"chat: the model's chat template fails: {str(error)[:200]}", "chat") from None
