"""Opening a model: :func:`load_model` takes what ``--model`` takes (``builtin:…``, a
checkpoint folder, a GGUF file, a hub id, or a model already made) and gives its
:class:`~._runner.Runner`, on attnlab's NumPy model where attnlab implements the
architecture and on transformers (with attnlab's engine as its attention, ``attnlab.hf``)
otherwise. :func:`open_checkpoint` is its first half: the checkpoint found, config.json or
the GGUF header read once, the backend chosen; :meth:`Checkpoint.load` the second."""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._exceptions import ArgumentError, ArgumentTypeError, CheckpointError, renamed
from .._validation import fail
from ..trace._display import shown_name
from ._preflight import key_groups, loading_error, preflight
from ._runner import Runner, encoder_decoder_refusal

__all__ = ["BACKENDS", "HEADS", "Checkpoint", "as_runner", "load_model", "open_checkpoint"]

BACKENDS = ("numpy", "transformers")
# what a transformers model is loaded with: "any", a language-modelling head where the checkpoint
# has one, else none; "lm", a causal or else a masked one; "causal"; "bare", none (its attention only)
HEADS = ("any", "lm", "causal", "bare")
# a model load_model takes as it is made
MADE = "its runner, an attnlab.models.Model, a transformers model and its tokenizer"


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint found and read once: ``given`` (as the caller named it), its ``path``
    (a folder, or a GGUF file), its ``config`` (config.json; None for a GGUF file or one
    without a readable config), its GGUF ``header`` (None for a folder), the ``backend``
    chosen and its ``description`` (the model type, or what a GGUF file holds and how it
    is dequantized)."""

    given: str
    path: Path
    config: dict[str, Any] | None
    header: Any
    backend: str
    description: str

    @property
    def encoder_decoder(self) -> bool:
        """Whether config.json says an encoder-decoder model (T5, BART); a GGUF file's are decoders."""
        return bool((self.config or {}).get("is_encoder_decoder"))

    def check_one_stack(self) -> None:
        """Refuse an encoder-decoder checkpoint before it loads, as its runner would
        (:meth:`Runner.check_one_stack`, in the same words).

        Raises:
            UnsupportedModelError: named ``model``.
        """
        if self.encoder_decoder:
            raise encoder_decoder_refusal(self.description)

    def load(self, head: str = "any") -> Runner:
        """The model on its backend, as a runner. A transformers model is loaded with the
        ``head`` of :data:`HEADS`, and its processor (an image or speech model's, which reads
        a picture or a sound), else its tokenizer.

        Raises:
            ArgumentError: named ``model``: transformers cannot load it, or would
                initialise weights at random (a head the checkpoint lacks), a hostile file.
            CheckpointError: attnlab's loader's refusals (:func:`attnlab.models.load`).
            MissingDependencyError: the models extra, or (``backend``) transformers, missing.
        """
        if head not in HEADS:
            raise fail("head", f"{', '.join(map(repr, HEADS[:-1]))} or {HEADS[-1]!r}", repr(head))
        if self.backend == "numpy":
            import numpy as np

            from ..models import load_located
            from ._numpy import NumpyRunner

            with _named_model():
                model = load_located(self.path, self.given, np.dtype(np.float32), self.config, self.header)
            return NumpyRunner(model, self.description)
        transformers = _transformers()
        from ._transformers import TransformersRunner

        preflight(self.path, self.config, self.header)
        with _quiet(transformers):
            model = self._transformers_model(transformers, head)
            processor = _processor(transformers, self.path)
        if processor is None and model.main_input_name == "input_ids":
            raise ArgumentError(f"model: {self.given} has no tokenizer transformers can load", "model")
        model.config.name_or_path = shown_name(self.given)  # what attnlab.hf names a model by
        return TransformersRunner(model, processor, self.description)

    def _transformers_model(self, transformers: Any, head: str) -> Any:
        """The model with ``head``: where the first choice would leave weights at random, the
        next; for "any", the model without a head where no language-modelling head loads (an
        architecture without one, T5's or ViT's, or a checkpoint without its weights)."""
        if head == "bare":
            return self._refused(self._attempt(transformers.AutoModel, ""))
        if head == "causal":
            return self._refused(self._attempt(transformers.AutoModelForCausalLM, " as a causal model"))
        failure = " with a language-modelling head"
        causal = self._attempt(transformers.AutoModelForCausalLM, failure)
        if not isinstance(causal, Exception) and not causal[1]:
            return causal[0]
        masked = self._attempt(transformers.AutoModelForMaskedLM, failure)  # an encoder's head: a masked one
        if not isinstance(masked, Exception) and not masked[1]:
            return masked[0]
        if head == "any":  # no head the checkpoint holds, or none its architecture has: the model without one
            return self._refused(self._attempt(transformers.AutoModel, ""))
        at_random = [not isinstance(tried, Exception) for tried in (causal, masked)]
        return self._refused(masked if at_random[1] and not at_random[0] else causal)

    def _attempt(self, auto_class: Any, failure: str) -> tuple[Any, list[str]] | ArgumentError:
        """``auto_class.from_pretrained`` on the attnlab backend (a GGUF file: by its folder
        and ``gguf_file``), its warnings silenced: the model and the weights transformers
        would initialise at random (``missing_keys``: a head the checkpoint lacks; a bare
        model's pooler excepted, which nothing attnlab shows reads), or the error of a
        checkpoint it cannot load, in one line naming the file or field."""
        from .. import hf

        where = {"gguf_file": self.path.name} if self.path.is_file() else {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model, info = auto_class.from_pretrained(
                    self.path.parent if where else self.path, attn_implementation=hf.NAME, output_loading_info=True,
                    **where,
                )  # fmt: skip
        except Exception as error:  # transformers, huggingface_hub, safetensors and torch raise their own kinds
            refusal = ArgumentError(
                f"model: transformers cannot load {self.given}{failure}: {loading_error(error, self.path)}", "model"
            )
            refusal.__cause__ = error
            return refusal
        missing = info.get("missing_keys") or ()
        fresh = sorted(set(missing) | {str(key[0]) for key in info.get("mismatched_keys") or ()})
        if auto_class.__name__ == "AutoModel":  # the trace and the heads read the attention, never the pooler
            fresh = [key for key in fresh if "pooler" not in key.split(".")]
        return model, fresh

    def _refused(self, attempt: tuple[Any, list[str]] | ArgumentError) -> Any:
        """The model of an attempt, or its refusal raised: its loading error, or the weights
        transformers would initialise at random."""
        if isinstance(attempt, Exception):
            raise attempt from attempt.__cause__
        model, fresh = attempt
        if fresh:
            raise ArgumentError(
                f"model {self.path}: transformers would initialise {key_groups(fresh)} at random (not in the "
                "checkpoint); attnlab refuses to show numbers from them",
                "model",
            )
        return model


def open_checkpoint(model: str | os.PathLike[str], *, backend: str | None = None, image: bool = False) -> Checkpoint:
    """The checkpoint ``model`` names (a folder, a GGUF file, ``builtin:…`` or a hub id,
    :func:`attnlab.models._checkpoint.locate`), config.json or the GGUF header read once,
    and the backend it runs on: ``backend``, else "numpy" for the architectures attnlab
    re-implements (config.json's ``model_type``, a GGUF file's architecture) and
    "transformers" for the rest, or for an ``image``.

    Raises:
        ArgumentError: ``backend`` "numpy" for an architecture attnlab does not implement,
            or not one of :data:`BACKENDS` (named ``backend``).
        CheckpointError: no such folder, file or hub id; a GGUF file that cannot be read.
    """
    _check_backend(backend)
    from ..models._checkpoint import locate

    with _named_model():
        path, given = locate(model), str(model)
    if path.is_file():
        return _gguf_checkpoint(given, path, backend, image)
    from ..models._architectures import ARCHITECTURES
    from ..models._checkpoint import read_config

    try:
        config: dict[str, Any] | None = read_config(path)
    except (OSError, CheckpointError):
        config = None  # attnlab's loader, or transformers', names what is missing
    model_type = None if config is None else config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):  # refused by attnlab's loader by name
        model_type = None
    runs = f"attnlab runs {', '.join(ARCHITECTURES)} in NumPy"
    refusal = f"'transformers' for {given}, a {model_type!r} model ({runs})"
    in_numpy = model_type is None or model_type in ARCHITECTURES  # None: attnlab's loader names what is missing
    return Checkpoint(given, path, config, None, _chosen(backend, in_numpy, image, refusal), str(model_type))


def _gguf_checkpoint(given: str, path: Path, backend: str | None, image: bool) -> Checkpoint:
    """A GGUF file's checkpoint: numpy for the architectures attnlab reads from GGUF,
    transformers (which dequantizes it itself) for the others, from its header alone."""
    from ..models._gguf import MODEL_TYPES, read_gguf

    header = read_gguf(path)
    arch = header.architecture
    reads = f"attnlab reads {', '.join(MODEL_TYPES)} GGUF files in NumPy"
    refusal = f"'transformers' for {given}, a GGUF of the architecture {arch!r} ({reads})"
    chosen = _chosen(backend, arch in MODEL_TYPES, image, refusal)
    how = "dequantized to float32" if chosen == "numpy" else "dequantized by transformers"
    return Checkpoint(given, path, None, header, chosen, f"{arch}, {header.quantization()}, {how}")


def _chosen(backend: str | None, in_numpy: bool, image: bool, refusal: str) -> str:
    """The backend: ``backend`` where given, else "numpy" where attnlab runs the
    architecture (``in_numpy``) and no ``image`` is read, else "transformers".

    Raises:
        ArgumentError: "numpy" asked for an architecture attnlab does not run (``refusal``
            is what ``backend`` should have been).
    """
    chosen = backend or ("numpy" if in_numpy and not image else "transformers")
    if chosen == "numpy" and not in_numpy:
        raise fail("backend", refusal, "'numpy'")
    return chosen


def load_model(model: Any, *, backend: str | None = None, tokenizer: Any = None, head: str = "any") -> Runner:
    """Open a model as ``attnlab --model`` does, and give the one object that
    ``attnlab.serve``, ``analysis.ablate``, ``analysis.head_types``, ``attnlab.view`` and
    ``attnlab.show`` (with ``text=``) accept: its runner on the backend chosen, with its
    tokenizer.

    Args:
        model: ``builtin:coref``, a checkpoint folder (config.json and safetensors), a GGUF
            file, a hub id (the local cache first), or a model already made: an
            :class:`attnlab.models.Model`, or a transformers model (with ``tokenizer``).
        backend: None (attnlab's NumPy model where attnlab implements the architecture:
            GPT-2, BERT, Llama, Mistral, Qwen2 and their GGUF files; transformers for the
            rest), "numpy" or "transformers" to force one.
        tokenizer: a transformers model's tokenizer; None otherwise.
        head: on the transformers backend, what the model is loaded with (:data:`HEADS`):
            "any" (default: a language-modelling head where one loads, which ablation and
            generation need, else the bare model), "lm", "causal" or "bare"; "any" for
            a model already made.

    Returns:
        :class:`attnlab.runner.Runner`: ``.model``, ``.tokenizer``, ``.backend``,
        ``.name``, ``.trace(text)``, ``.generate(text, n)``.

    Raises:
        ArgumentError: an architecture ``backend="numpy"`` cannot run, a backend not one
            of :data:`BACKENDS` or None (named ``backend``); a checkpoint that transformers
            cannot load or would fill with random weights (named ``model``); a ``head``
            for a model already made.
        ArgumentTypeError: a model of none of these kinds (named ``model``).
        CheckpointError: no such checkpoint, one attnlab's loader refuses (named ``model``
            where the refusal is of the name).
        MissingDependencyError: the extra the backend needs is not installed.
        UnsupportedModelError: a transformers model attnlab's backend cannot run.
    """
    _check_backend(backend)
    if isinstance(model, (str, os.PathLike)):
        if tokenizer is not None:
            raise fail("tokenizer", "None for a checkpoint (its own is loaded)", type(tokenizer).__name__)
        return open_checkpoint(model, backend=backend).load(head)
    from ..models._checkpoint import CHECKPOINT

    runner = as_runner(model, tokenizer, "model", f"{CHECKPOINT} (str or Path), or a model already made ({MADE})")
    if backend is not None and backend != runner.backend:
        raise fail("backend", f"None or {runner.backend!r} for a model already made", repr(backend))
    if head != "any":
        raise fail("head", "'any' for a model already made (it has the head it was made with)", repr(head))
    return runner


def _check_backend(backend: str | None) -> None:
    """``backend`` one of :data:`BACKENDS` or None."""
    if backend is not None and backend not in BACKENDS:
        raise fail("backend", f"{', '.join(map(repr, BACKENDS))} or None", repr(backend))


@contextlib.contextmanager
def _named_model() -> Iterator[None]:
    """:func:`attnlab.models._checkpoint.locate`'s and attnlab's loader's refusals of the
    checkpoint named ``model`` (this module's argument) where they name ``name_or_dir``
    (their own), in the message where it starts with it."""
    try:
        yield
    except (CheckpointError, ArgumentTypeError) as error:
        if error.argument != "name_or_dir":
            raise
        raise type(error)(renamed(error, {"name_or_dir": "model"}) or str(error), "model") from None


def as_runner(model: Any, tokenizer: Any, argument: str, expected: str) -> Runner:
    """The runner of ``model``: itself where it is one (:func:`load_model`'s; then
    ``tokenizer`` must be None, it has its own), a :class:`NumpyRunner` for an
    :class:`attnlab.models.Model` (``tokenizer`` None), a :class:`TransformersRunner` for a
    transformers model and its ``tokenizer``.

    Raises:
        ArgumentTypeError: anything else, named ``argument``, ``expected`` said.
        ArgumentError: a tokenizer given with a model that has its own.
        UnsupportedModelError: a transformers model attnlab's backend cannot run.
    """
    from ..models._model import Model

    if isinstance(model, Runner):
        if tokenizer is not None:
            raise fail("tokenizer", "None for a loaded model (it has its own)", type(tokenizer).__name__)
        return model
    if isinstance(model, Model):
        if tokenizer is not None:
            raise fail("tokenizer", "None for an attnlab model (it has its own)", type(tokenizer).__name__)
        from ._numpy import NumpyRunner

        return NumpyRunner(model)
    if type(model).__module__.startswith("transformers.") and hasattr(model, "set_attn_implementation"):
        from ._transformers import TransformersRunner  # torch, imported for a transformers model only

        return TransformersRunner(model, tokenizer)
    raise fail(argument, expected, type(model).__name__, TypeError)


def _transformers() -> Any:
    """The transformers module, with attnlab's backend registered.

    Raises:
        MissingDependencyError: torch or transformers missing (named ``backend``).
    """
    try:
        from .. import hf  # noqa: F401 - registers attn_implementation="attnlab"
        from ..hf._torch import transformers
    except ImportError as error:
        from .._exceptions import MissingDependencyError

        raise MissingDependencyError(f"backend transformers: {error}", "backend") from None
    return transformers


@contextlib.contextmanager
def _quiet(transformers: Any) -> Iterator[None]:
    """Loading without transformers' progress bars and notices (a command's output is its
    own); its errors still raise. Its GGUF reader draws its own bar ("Converting and
    de-quantizing GGUF tensors…", tqdm.auto's, which ``disable_progress_bar`` does not
    reach): that module's ``tqdm`` is made a disabled one while the model loads."""
    logging = transformers.utils.logging
    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    gguf_reader = _gguf_reader()
    bar = getattr(gguf_reader, "tqdm", None)
    if bar is not None:
        gguf_reader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        if bar is not None:
            gguf_reader.tqdm = bar
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def _gguf_reader() -> Any:
    """transformers' GGUF reader (the module that dequantizes a GGUF file's tensors), or None."""
    try:
        import transformers.modeling_gguf_pytorch_utils as reader
    except ImportError:  # pragma: no cover - a transformers without GGUF support
        return None
    return reader


def _processor(transformers: Any, directory: Path) -> Any:
    """The directory's processor (an image processor, a speech processor) or tokenizer; a
    GGUF file's tokenizer."""
    if directory.is_file():  # a GGUF file: its tokenizer, from its metadata
        try:
            return transformers.AutoTokenizer.from_pretrained(directory.parent, gguf_file=directory.name)
        except (OSError, ValueError, KeyError, TypeError):
            return None
    for auto in (transformers.AutoProcessor, transformers.AutoTokenizer):
        try:
            return auto.from_pretrained(directory)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None
