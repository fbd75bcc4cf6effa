"""A chat model's prompt: the text as one user message in the checkpoint's chat template,
rendered with Jinja as ``transformers``' ``apply_chat_template`` renders it.

The template is the checkpoint's code: it runs in a child process bounded in memory, CPU
time and output (:mod:`._chat_sandbox`), in Jinja's immutable sandbox with transformers'
settings, on ``messages=[{"role": "user", "content": text}]``, the named ``bos_token`` and
``eos_token``, and ``add_generation_prompt=True``; the result is tokenized without adding
special tokens, as transformers tokenizes it.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._validation import ArgumentError, MissingDependencyError, fail, unicode_text

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
        ArgumentError: a tokenizer without a chat template, a text with a lone surrogate,
            a template that leaves the message out of the prompt, writes a lone
            surrogate, or fails or passes a bound of :func:`_render`.
        MissingDependencyError: jinja2 is not installed.
    """
    if tokenizer.chat_template is None:
        raise fail("chat", "a chat model (a tokenizer with a chat template)", "a model without one")
    if not isinstance(text, str):
        raise fail("text", "a string", type(text).__name__, TypeError)
    bos, eos = tokenizer.bos_token, tokenizer.eos_token
    rendered, around = _render(tokenizer.chat_template, [unicode_text("text", text), PLACEHOLDER], bos, eos)
    try:
        unicode_text("chat", rendered)
    except ArgumentError:  # the user's text has none: the template wrote it
        raise _fails("it writes a lone surrogate (half of a UTF-16 pair), which no text holds") from None
    if rendered == around:  # the same prompt whatever the message: the template never writes it
        raise fail("chat", "a chat template that writes the user's message", "one that leaves it out of the prompt")
    before, found, after = around.partition(PLACEHOLDER)
    if not found or PLACEHOLDER in after or rendered != before + text + after:
        return rendered, None
    start, end = len(before), len(before) + len(text)
    return rendered, [b <= start or a >= end for a, b in tokenizer.offsets(rendered)]


PLACEHOLDER = "\ue000attnlab-user-text\ue001"  # private-use characters: in no template, kept by every one

# What one rendering may take (docs/guides/models.md, "Chat models"): a real template takes
# about 30 MiB, a few milliseconds and a few hundred characters besides the message.
MEMORY = 512 * 2**20  # bytes of the renderer's address space
SECONDS = 5  # of the renderer's CPU time: its steps, whatever they are
WALL_SECONDS = 30  # of the clock, on a machine too loaded to give it those CPU seconds
CHARACTERS = 10**5  # a rendering's own, besides the message's: a template's text is a few hundred


def _render(template: str, texts: list[str], bos: str | None, eos: str | None) -> list[str]:
    """The template rendered for each text as the one user message, with the generation
    prompt, by :mod:`._chat_sandbox` in a child process bounded in memory, CPU time and
    output (its docstring says how); the clock bounds the child too.

    Raises:
        ArgumentError: the template fails, or passes a bound (named, with the bound).
        MissingDependencyError: jinja2 is not installed.
    """
    if importlib.util.find_spec("jinja2") is None:
        raise MissingDependencyError("chat: a chat template needs jinja2: pip install 'attnlab[models]'")
    request = {
        "path": sys.path, "template": template, "texts": texts, "bos": bos or "", "eos": eos or "",
        "memory": MEMORY, "seconds": SECONDS, "characters": CHARACTERS,
    }  # fmt: skip
    sandbox = str(Path(__file__).with_name("_chat_sandbox.py"))
    try:
        done = subprocess.run(
            [sys.executable, "-I", sandbox], input=json.dumps(request), capture_output=True, text=True,
            encoding="utf-8", timeout=WALL_SECONDS,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise _fails(f"it ran for more than {WALL_SECONDS} s") from None
    if done.returncode == -getattr(signal, "SIGXCPU", 0):  # the kernel's end of a process past RLIMIT_CPU
        raise _fails(f"it ran for more than {SECONDS} s of CPU time")
    try:
        answer = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise _fails(f"its renderer stopped (exit status {done.returncode})") from None
    if "error" in answer:
        raise _fails(answer["error"])
    return list(answer["rendered"])


def _fails(why: str) -> ArgumentError:
    return ArgumentError(f"chat: the model's chat template fails: {why}", "chat")
