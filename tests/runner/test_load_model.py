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
