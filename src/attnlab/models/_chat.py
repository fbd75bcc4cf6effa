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


def chat_prompt(tokenizer: Tokenizer, text: str) -> tuple[str, list[bool] | None]:
    """``text`` as the user's message in ``tokenizer``'s chat template, with the prompt
    for the assistant's answer; and, per token of it, whether the template put it there
    (True) or it is the user's text (False), or None where the template changes the text
    (a ``trim``), so that its words cannot be told apart.

    The user's words are found by rendering the template a second time with a placeholder
    that no template writes: what comes before and after the placeholder is the template's.

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
    bos, eos = tokenizer.bos_token, tokenizer.eos_token
    rendered = _render(tokenizer.chat_template, text, bos, eos)
    around = _render(tokenizer.chat_template, PLACEHOLDER, bos, eos)
    before, found, after = around.partition(PLACEHOLDER)
    if not found or PLACEHOLDER in after or rendered != before + text + after:
        return rendered, None
    start, end = len(before), len(before) + len(text)
    return rendered, [b <= start or a >= end for a, b in tokenizer.offsets(rendered)]


PLACEHOLDER = "\ue000attnlab-user-text\ue001"  # private-use characters: in no template, kept by every one
_MOST_ITEMS = 10**6  # a template's product or power may make at most this many characters or digits


def _render(template: str, text: str, bos: str | None, eos: str | None) -> str:
    """The template rendered for one user message and the generation prompt, in Jinja's
    immutable sandbox with a bound on what ``*`` and ``**`` may make."""
    try:
        from jinja2 import TemplateError
        from jinja2.exceptions import SecurityError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise MissingDependencyError("chat: a chat template needs jinja2: pip install 'attnlab[models]'") from None

    class Sandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            sizes = [len(x) * abs(y) for x, y in ((left, right), (right, left)) if _sized(x) and _whole(y)]
            power = operator == "**" and _whole(left) and _whole(right) and abs(right) * abs(left).bit_length()
            if (operator == "*" and sizes and max(sizes) > _MOST_ITEMS) or (power and power > 4 * _MOST_ITEMS):
                raise SecurityError(f"a result too large to make ({operator})")
            return super().call_binop(context, operator, left, right)

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    environment = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda form: datetime.now().strftime(form)
    try:
        return environment.from_string(template).render(
            messages=[{"role": "user", "content": text}], add_generation_prompt=True,
            bos_token=bos or "", eos_token=eos or "",
        )  # fmt: skip
    except Exception as error:  # a template is the checkpoint's code: any failure of it is the checkpoint's
        words = " ".join(str(error).split())[:200] or type(error).__name__
        raise ArgumentError(f"chat: the model's chat template fails: {words}", "chat") from None


def _sized(x: Any) -> bool:
    return isinstance(x, (str, list, tuple))


def _whole(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
