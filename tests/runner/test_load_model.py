"""attnlab.load_model: what --model takes, opened once, handed as one object to serve,
head_types and view, with no import from attnlab.cli (the snippet of docs/design.md)."""

from __future__ import annotations

import urllib.request

import pytest

from checkpoints import minilm_dir, smollm2_gguf


@pytest.mark.slow
@pytest.mark.parametrize("which", ["gguf", "folder"])
def test_a_gguf_file_and_a_folder_open_once_and_go_to_serve_head_types_and_view(which: str, tmp_path) -> None:
    pytest.importorskip("tokenizers")
    import attnlab
    from attnlab import analysis

    source = smollm2_gguf() if which == "gguf" else minilm_dir()
    model = attnlab.load_model(source)
    assert model.backend == "numpy"
    assert model.description == ("llama, Q4_1, dequantized to float32" if which == "gguf" else "bert")
    kinds = analysis.head_types(model, "The cat sat on the mat.", repeat=0)
    assert kinds.scores["previous"].shape == (model.layers, model.heads)
    page = tmp_path / "page.html"
    attnlab.view(model, page, text="The cat sat on the mat.")
    assert page.stat().st_size > 0
    server = attnlab.serve(model, port=0, block=False)
    try:
        with urllib.request.urlopen(server.url, timeout=60) as answer:
            assert answer.status == 200
    finally:
        server.stop()


def test_a_t5_and_a_vit_open_as_view_model_opens_them_and_the_vit_reads_a_picture(tmp_path) -> None:
    """An architecture without a language-modelling head (T5Model, ViTModel) opens with the
    default head, as the bare model; a vision model with its image processor, which reads
    the picture given to its trace."""
    import numpy as np

    import attnlab
    from checkpoints import train_tokenizers

    torch = pytest.importorskip("torch")
    T = pytest.importorskip("transformers")
    Image = pytest.importorskip("PIL.Image")
    torch.manual_seed(0)
    t5 = T.T5Config(vocab_size=300, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2, decoder_start_token_id=0)
    T.T5Model(t5).save_pretrained(tmp_path / "t5")
    T.AutoTokenizer.from_pretrained(train_tokenizers(tmp_path / "tok")["vocab.txt-tokenizer.json"]).save_pretrained(
        tmp_path / "t5"
    )
    runner = attnlab.load_model(tmp_path / "t5")
    assert (runner.backend, type(runner.model).__name__) == ("transformers", "T5Model")
    assert runner.trace(("the cat", "the dog")).layers
    vit = T.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, image_size=32,
                      patch_size=8)  # fmt: skip
    T.ViTModel(vit).save_pretrained(tmp_path / "vit")
    T.ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "vit")
    runner = attnlab.load_model(tmp_path / "vit")
    assert (runner.backend, runner.tokenizer) == ("transformers", None)
    picture = Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 40, 3), dtype=np.uint8))
    trace = runner.trace(picture)
    assert trace.weights.shape == (2, 2, 17, 17)  # (layers, H, L, S): the class token and 4 × 4 patches


def test_load_models_refusals_name_its_own_arguments_in_python_words(tmp_path) -> None:
    """No CLI word (--backend) and no other function's argument (name_or_dir): ``model``,
    ``backend`` and ``head``, each with what it takes."""
    import json

    import attnlab

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    runner = attnlab.load_model("builtin:coref")
    cases = [
        ((tmp_path,), {"backend": "numpy"}, "backend", r"expected 'transformers' for .*, a 't5' model \(attnlab runs "
         r"gpt2, .* in NumPy\), got 'numpy'"),
        (("/nonexistent/x",), {}, "model", r"expected a checkpoint folder, a \.gguf file, builtin:NAME or a hub id, "
         r"got '/nonexistent/x' \(no such directory\)"),
        ((42,), {}, "model", r"expected a checkpoint folder, .* or a model already made \(.*\), got int"),
        (("builtin:coref",), {"backend": "bogus"}, "backend", r"expected 'numpy', 'transformers' or None, got 'bogus'"),
        ((runner,), {"backend": "bogus"}, "backend", r"expected 'numpy', 'transformers' or None, got 'bogus'"),
        ((runner,), {"head": "bare"}, "head", r"expected 'any' for a model already made .*, got 'bare'"),
        (("builtin:coref",), {"head": "x"}, "head", r"expected 'any', 'lm', 'causal' or 'bare', got 'x'"),
    ]  # fmt: skip
    (tmp_path / "empty").mkdir()
    cases.append(((tmp_path / "empty",), {}, "model", r".*empty has no config\.json.*"))  # attnlab's loader's
    for args, options, argument, message in cases:
        with pytest.raises(attnlab.AttnlabError, match=f"^{argument}: {message}$") as caught:
            attnlab.load_model(*args, **options)
        assert caught.value.argument == argument  # type: ignore[attr-defined]


def test_a_missing_dependency_can_name_the_argument_that_needs_it() -> None:
    from attnlab import MissingDependencyError

    error = MissingDependencyError("backend transformers: no module named torch", "backend")
    assert (error.argument, str(error)) == ("backend", "backend transformers: no module named torch")
    assert MissingDependencyError("x").argument == ""
