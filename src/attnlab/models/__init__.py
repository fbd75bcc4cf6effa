"""Pretrained Hugging Face models (GPT-2, BERT, Llama, Qwen2, Mistral) run in NumPy on
attnlab's attention engine, sliding windows included, with every step of every head
available::

    from attnlab import models

    model = models.load("gpt2")                        # a hub id or a checkpoint directory
    logits = model(model.tokenizer.encode("Hello")).logits  # (L, vocab)
    trace = model.trace("小明是个运动达人，他平时很爱打篮球", layers=-1)
    trace[11].weights                                  # (heads, L, L)
    model.generate(ids, 20)                            # greedy, with a KV cache

Needs ``pip install 'attnlab[models]'`` (tokenizers, huggingface_hub, scipy, gguf). Weights
are read from safetensors, memory-mapped, or from a GGUF file (``models.load("x.gguf")``),
dequantized; never from pickle.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .._exceptions import renamed
from .._io import exists
from .._validation import fail
from ..trace import GenerationTrace, ModelStatistics, ModelTrace
from ..trace._display import shown_name
from ._architectures import ARCHITECTURES, end_tokens, read_network
from ._checkpoint import CONFIG, CheckpointError, Weights, locate, read_config
from ._model import Model, ModelOutput
from ._network import ModelConfig
from ._tokenizer import Tokenizer, read_tokenizer

__all__ = [
    "SUPPORTED",
    "CheckpointError",
    "GenerationTrace",
    "Model",
    "ModelConfig",
    "ModelOutput",
    "ModelStatistics",
    "ModelTrace",
    "Tokenizer",
    "load",
]

SUPPORTED = tuple(ARCHITECTURES)  # config.json model_type values


def load(name_or_dir: str | os.PathLike[str], *, dtype: Any = np.float32) -> Model:
    """The model in a checkpoint directory, or of a hub id (the local Hugging Face cache
    first; a download only when online and ``HF_HUB_OFFLINE`` is not set).

    Args:
        name_or_dir: a checkpoint directory (config.json and safetensors weights), a GGUF
            file (llama.cpp's: Llama, Qwen2 or Mistral, any quantization the gguf package
            dequantizes, dequantized to ``dtype``), a hub id (``gpt2``,
            ``Qwen/Qwen2.5-0.5B``) or ``builtin:coref``, the model shipped with attnlab.
        dtype: float32 (default) or float64, what the model computes in; float16 and
            bfloat16 weights are widened to it. Weights already in ``dtype`` stay memory-mapped.

    Raises:
        ArgumentError: no such directory or hub id, no config.json, an unsupported
            ``model_type``, only pickle weights, a truncated or corrupted safetensors file,
            a missing weight, one of the wrong shape or not of a float dtype, one holding a
            NaN or an infinity (named), a config value out of its range; a GGUF file that is
            truncated or corrupted, of another architecture or quantization, larger than
            the machine's memory, or with a tensor its architecture does not use (named);
            a file the system cannot map; any other file.
        ArgumentTypeError: ``dtype`` None.
        MissingDependencyError: the models extra is not installed.
    """
    if dtype is None:  # np.dtype(None) is float64: a silent choice, as torch's dtype=None is not
        raise fail("dtype", "numpy.float32 or numpy.float64", "None", TypeError)
    try:
        compute = np.dtype(dtype)
    except TypeError:
        compute = None
    if compute is None or compute not in (np.dtype(np.float32), np.dtype(np.float64)):  # dtype == None is float64
        raise fail("dtype", "numpy.float32 or numpy.float64", repr(dtype))
    return load_located(locate(name_or_dir), str(name_or_dir), compute)


def load_located(
    directory: Path, given: str, compute: np.dtype, config: dict[str, Any] | None = None, header: Any = None
) -> Model:
    """:func:`load` of a checkpoint already found (``directory``, a folder or a GGUF file;
    ``given``, as its caller named it) in ``compute``'s dtype, config.json or the GGUF
    ``header`` passed where already read (None: read here), so each is read once
    (``attnlab.load_model``'s). Raises as :func:`load` does."""
    if directory.is_file():  # a GGUF file: config, weights and tokenizer all in it
        from ._gguf import read_gguf_model

        gguf_config, weights, tokenizer, note = read_gguf_model(directory, compute, header)
        try:
            network = read_network(gguf_config, weights, compute)
        except CheckpointError as error:  # the settings are config.json's names, read from the file's metadata
            message = renamed(error, {CONFIG: f"{directory}: its metadata (config.json's names)"})
            if message is None:
                raise
            raise CheckpointError(message) from None
        weights.check_all_read(gguf_config)
        return Model(network, tokenizer, shown_name(given), weights_note=note)
    config = read_config(directory) if config is None else config
    network = read_network(config, Weights(directory), compute)
    generation = directory / "generation_config.json"  # where transformers' generate finds the end token
    if exists(generation):
        ends = end_tokens(read_config(directory, generation.name).get("eos_token_id"), generation.name)
        if ends:
            network = replace(network, config=replace(network.config, eos_token_id=ends))
    return Model(network, read_tokenizer(directory), shown_name(given))


for _public in (
    CheckpointError,
    GenerationTrace,
    Model,
    ModelConfig,
    ModelOutput,
    ModelStatistics,
    ModelTrace,
    Tokenizer,
):
    _public.__module__ = __name__
del _public
