"""The chat template's renderer, run as a program of its own by :mod:`._chat`: a template
is the checkpoint's code, so it runs in a child process that the operating system bounds.

Read from standard input, one JSON object: ``path`` (the parent's ``sys.path``, so that
jinja2 is found where the parent finds it), ``template``, ``texts`` (each rendered as the
one user message), ``bos`` and ``eos`` (the tokens' text, "" for none), and the bounds
``memory`` (bytes of address space), ``seconds`` (of CPU time) and ``characters`` (of one
rendering's output besides the message's). Written to standard output, one JSON object: ``{"rendered": [...]}``,
one string per text, or ``{"error": "..."}`` with one line saying why the template failed.

The bounds hold whatever the template does, because nothing in it can get past them:
the address space (``RLIMIT_AS``) stops a string or list built by any operator, filter or
method (``'x' * n``, ``~`` doubled in a loop, ``center``, ``%``, ``format``); the CPU
time (``RLIMIT_CPU``) stops a loop or a filter that runs without end (nested ``range``,
``lipsum``): the kernel ends the process; the output is counted as Jinja yields it, so a
loop that writes without end stops at ``characters`` besides the message. Within them the template runs in
Jinja's immutable sandbox with transformers' settings (blocks trimmed, ``loopcontrols``,
``tojson`` unescaped, ``raise_exception`` and ``strftime_now``).

Only the standard library and jinja2 are imported: the parent starts this file by its path.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

__all__ = ["main"]


def main() -> None:
    """Read the request, bound this process, render each text, write the answer."""
    request = json.loads(sys.stdin.read())
    _bound(request["memory"], request["seconds"])
    sys.path[:] = request["path"]
    try:
        answer: dict[str, Any] = {"rendered": [_render(request, text) for text in request["texts"]]}
    except MemoryError:
        answer = {"error": f"it builds more than {request['memory'] >> 20} MiB"}
    except Exception as error:  # a template is the checkpoint's code: any failure of it is the checkpoint's
        answer = {"error": " ".join(str(error).split())[:200] or type(error).__name__}
    sys.stdout.write(json.dumps(answer))


def _bound(memory: int, seconds: int) -> None:
    """This process's address space and CPU time (where the platform has them: not on Windows)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows: the parent's wall-clock limit still holds
        return
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))


def _render(request: dict[str, Any], text: str) -> str:
    """One rendering for the user message ``text``, stopped past ``characters`` besides it."""
    from jinja2 import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

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
    chunks = environment.from_string(request["template"]).generate(
        messages=[{"role": "user", "content": text}], add_generation_prompt=True,
        bos_token=request["bos"], eos_token=request["eos"],
    )  # fmt: skip
    own, written, kept = request["characters"], 0, []
    for chunk in chunks:
        written += len(chunk)
        if written > own + len(text):
            raise TemplateError(f"it writes more than {own:,} characters besides the message")
        kept.append(chunk)
    return "".join(kept)


if __name__ == "__main__":
    main()
