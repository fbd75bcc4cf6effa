"""The page that runs its model (attnlab view --in-browser): its script's tokenizer and forward under
node (tests/viz/js/inpage/inpage.test.js) against attnlab in Python. The oracle of the forward is
attnlab's NumPy model in float64 loaded from a checkpoint written here out of the weights the page
stores (decoded from its base64 here, float16 widened where it stores float16): hidden states, every
layer's q, k, v and weights, with heads ablated (their output zero, through the forward's own hook) and
other scales. The oracle of the tokenizer is attnlab's (the tokenizers library's) on many strings."""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnlab import models
from attnlab.models._network import Recorder
from attnlab.trace._display import display_text
from attnlab.viz._inpage import model_spec
from attnlab.viz._page_data import page_data

sys.path.insert(0, str(Path(__file__).parents[1]))
from checkpoints import minilm_dir

NODE_TEST = Path(__file__).parent / "js" / "inpage" / "inpage.test.js"
COREF_DIR = Path(models.__file__).parents[1] / "builtin" / "coref"
SENTENCES = [
    "小明是个运动达人，小红是个画家，他平时很爱打篮球",
    "小明是个运动达人，小红是个画家，她平时很爱画画",
    "小明喜欢打球，小红喜欢唱歌，她",
]
# the names the page stores its weights under, as a BERT checkpoint names them
HF_NAMES = {
    "word": "embeddings.word_embeddings.weight", "position": "embeddings.position_embeddings.weight",
    "embed_norm.weight": "embeddings.LayerNorm.weight", "embed_norm.bias": "embeddings.LayerNorm.bias",
}  # fmt: skip
HF_LAYER = {
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "o": "attention.output.dense", "attention_norm": "attention.output.LayerNorm", "up": "intermediate.dense",
    "down": "output.dense", "mlp_norm": "output.LayerNorm",
}  # fmt: skip


def strings() -> list[str]:
    """Texts for the tokenizers: Chinese, punctuation (ASCII, full-width, Unicode), accents, case, spaces and
    controls, special tokens typed, long words, other scripts, and random mixtures of them."""
    fixed = [
        *SENTENCES,
        "Hello, world! It's 3.14... (really?)",
        "Café Über naïve résumé ÀÉÎÕÜ",
        "小明likes打篮球!!",
        "\t a\nb\u00a0c\u3000d\u2028e",
        "a\u0000b\u200bc\ufeffd\ufffde\x7f",
        "[MASK] is [CLS] and [mask] [SEP]x",
        "x" * 101,
        "y" * 100,
        "😀👍 emoji",
        "こんにちは、世界。",
        "안녕하세요",
        "ΣΑΣ ΟΔΥΣΣΕΥΣ σοφός",
        "İstanbul",
        "नमस्ते दुनिया",
        "مرحبا بالعالم",
        "ＡＢＣ１２３！",
        "unaffable playing played",
        "2026-12-05 $100 & 50% ~ ^_^",
        "e.g. U.S.A. don't can't won't",
        '"quoted" «guillemets» „low“',
        "𠀀𪜀 ﬁ Ⅻ ㈱",
        "",
        "   ",
        "。，、；：？！",
        "他她它 他们",
        "HELLO World hElLo",
        "a\u0301 o\u0308 e\u0300\u0301 n\u0303",
    ]
    rng = np.random.default_rng(0)
    pool = [*"小明红他她是个运动达人画家，。！？、：；“”（）abcXYZéüÅß 1234567890-_'\"!?.,\t\n\u00a0ㄱ😀ﬁ[]"]
    pool += ["[MASK]", "[CLS]", "play", "##ing", "un", "the"]
    mixed = ["".join(rng.choice(pool, size=int(rng.integers(1, 25)))) for _ in range(150)]
    return fixed + mixed


def stored(spec: dict[str, Any]) -> dict[str, np.ndarray]:
    """The page's weights decoded from its base64 (little-endian float16 or float32), as float32."""
    out = {}
    for name, x in spec["weights"].items():
        raw = np.frombuffer(base64.b64decode(x["data"]), dtype="<f2" if x["dtype"] == "float16" else "<f4")
        out[name] = raw.astype(np.float32).reshape(x["shape"])
    return out


def reloaded(spec: dict[str, Any], source: Path, folder: Path) -> models.Model:
    """attnlab's model in float64 over the page's stored weights: a checkpoint written to ``folder``
    with BERT's names, the config and tokenizer files of ``source``."""
    from safetensors.numpy import save_file

    weights = stored(spec)
    tensors = {}
    for name, x in weights.items():
        if name in HF_NAMES:
            tensors[HF_NAMES[name]] = x
        elif name == "type":  # token type 0's row: the page's sentences are all of type 0
            tensors["embeddings.token_type_embeddings.weight"] = np.stack([x, np.zeros_like(x)])
        else:
            layer, part, kind = name.split(".")
            tensors[f"encoder.layer.{layer}.{HF_LAYER[part]}.{kind}"] = x
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    for file in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (source / file).exists():
            shutil.copy(source / file, folder / file)
    return models.load(folder, dtype=np.float64)


def listed(x: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(x, dtype=np.float64).ravel()]


def forward_case(model: models.Model, text: str, multiplier: float, ablated: list[tuple[int, int]]) -> dict[str, Any]:
    """NumPy's forward of ``text`` with every layer's scale times ``multiplier`` and the ``ablated``
    (layer, head) outputs zero: the hidden states (embeddings and each layer's), q, k, v and weights."""
    network = copy.deepcopy(model.network)
    for block in network.blocks:
        block.attn.scale *= multiplier

    def zeroed(layer: int, out: np.ndarray) -> np.ndarray:  # out (B, H, L, E)
        out = out.copy()
        for at, head in ablated:
            if at == layer:
                out[:, head] = 0.0
        return out

    ids = model.tokenizer.encode(text)
    layers = len(network.blocks)
    record = Recorder(trace_layers=frozenset(range(layers)), head_outputs=zeroed)
    hidden: list[np.ndarray] = []
    network.forward(ids[None], None, None, None, record, hidden)  # (L,) -> (1, L)
    return {
        "text": text, "ids": [int(i) for i in ids], "multiplier": multiplier,
        "ablated": [f"{at},{head}" for at, head in ablated],
        "hidden": [listed(x[0]) for x in hidden],
        "layers": [
            {name: listed(getattr(record.traces[i], name)) for name in ("Q", "K", "V", "weights")}
            for i in range(layers)
        ],
    }  # fmt: skip


def tokenizer_cases(model: models.Model) -> list[dict[str, Any]]:
    out = []
    for text in strings():
        ids = model.tokenizer.encode(text)
        shown = [display_text(t) for t in model.tokenizer.pieces(ids)[0]]
        out.append({"text": text, "ids": [int(i) for i in ids], "tokens": shown})
    return out


def run_node(tmp_path: Path, cases: dict[str, Any]) -> str:
    node = shutil.which("node")
    assert node, "the page's script's tests need node (Debian's nodejs, as the README's test command installs it)"
    path = tmp_path / "inpage-cases.json"
    path.write_text(json.dumps(cases), encoding="utf-8")
    run = subprocess.run(
        [node, "--test", str(NODE_TEST)], env={**os.environ, "ATTNLAB_INPAGE_CASES": str(path)},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "# fail 0" in run.stdout and "# pass 0" not in run.stdout, run.stdout
    return run.stdout


def test_the_pages_tokenizer_and_forward_are_attnlabs_for_builtin_coref(tmp_path):
    coref = models.load("builtin:coref")
    spec = model_spec(coref)
    assert {x["dtype"] for x in spec["weights"].values()} == {"float32"}  # small enough to be exact
    oracle = reloaded(spec, COREF_DIR, tmp_path / "coref")
    forwards = [forward_case(oracle, text, 1.0, []) for text in SENTENCES]
    forwards += [
        forward_case(oracle, SENTENCES[1], 1.0, [(1, 0)]),  # the answering head ablated
        forward_case(oracle, SENTENCES[1], 1.0, [(0, 1), (0, 3), (1, 2)]),
        forward_case(oracle, SENTENCES[1], 0.1, []),
        forward_case(oracle, SENTENCES[2], 8.0, [(0, 0)]),
    ]
    trace = oracle.trace(SENTENCES[1])
    page = page_data(trace, None, "zh")  # what the page draws, from Python: the page's own must be its form
    mini = models.load(minilm_dir())
    cases = {
        "models": [{"name": "builtin:coref", "spec": spec, "forwards": forwards}],
        "tokenizers": [
            {"name": "builtin:coref", "spec": spec["tokenizer"], "cases": tokenizer_cases(coref)},
            {"name": "all-MiniLM-L6-v2", "spec": model_spec_tokenizer(mini), "cases": tokenizer_cases(mini)},
        ],
        "page": {"spec": spec, "text": SENTENCES[1], "expected": page, "skeleton": page},
    }
    assert "# pass 5" in run_node(tmp_path, cases)


def model_spec_tokenizer(model: models.Model) -> dict[str, Any]:
    from attnlab.viz._inpage import _tokenizer_spec

    return _tokenizer_spec(model)


@pytest.mark.slow
def test_the_pages_forward_is_attnlabs_for_minilm_in_float16(tmp_path):
    mini = models.load(minilm_dir())
    spec = model_spec(mini)
    assert {x["dtype"] for x in spec["weights"].values()} == {"float16"}  # 22.7 M weights: 16 bits each
    oracle = reloaded(spec, Path(minilm_dir()), tmp_path / "minilm")
    text = "The cat sat on the mat because it was tired."
    forwards = [forward_case(oracle, text, 1.0, []), forward_case(oracle, text, 0.5, [(5, 3), (2, 0)])]
    cases = {
        "models": [{"name": "all-MiniLM-L6-v2", "spec": spec, "forwards": forwards}],
        "tokenizers": [],
        "page": None,
    }
    assert "# pass 1" in run_node(tmp_path, cases)


def test_a_model_the_page_cannot_run_is_refused_in_one_line():
    from attnlab import ArgumentError

    class Llama:  # what the page reads of a causal model
        name = "SmolLM2"
        tokenizer = None
        network = None
        config = models.ModelConfig("llama", 10, 8, 1, 2, 2, 4, 16, True)

    with pytest.raises(
        ArgumentError, match=r"^model: expected a BERT encoder .*got SmolLM2: a causal model of type 'llama'"
    ):
        model_spec(Llama())
    with pytest.raises(ArgumentError, match="model: expected a model attnlab runs in NumPy"):
        model_spec(object())


def test_a_model_past_the_pages_budget_is_refused_with_its_size(monkeypatch):
    from attnlab import ArgumentError
    from attnlab.viz import _page_size

    coref = models.load("builtin:coref")
    monkeypatch.setitem(_page_size.PAGE_LIMITS, "exact", 0)  # float16, then 2 bytes a weight
    monkeypatch.setitem(_page_size.PAGE_LIMITS, "page", 100_000)
    weights = 64 * 101 + 64 * 64 + 64 + 2 * 64 + 2 * (4 * (64 * 64 + 64) + 2 * 64 * 128 + 128 + 64 + 4 * 64)
    size = -(-weights * 2 // 3) * 4  # base64 characters of 2 bytes a weight
    refusal = (
        f"got builtin:coref: its {weights / 1e6:.1f} M weights take {size / 1e6:.0f} MB in 16 bits, "
        "past the page's 0.1 MB"
    )
    with pytest.raises(ArgumentError, match=re.escape(refusal)):
        model_spec(coref)


def test_a_bert_whose_activation_the_page_lacks_is_refused_before_the_page_is_written(tmp_path):
    import json
    import shutil
    from importlib.resources import files

    from attnlab import ArgumentError

    folder = tmp_path / "tanh-bert"
    shutil.copytree(str(files("attnlab") / "builtin" / "coref"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["hidden_act"] = "gelu_pytorch_tanh"  # NumPy runs it; the page's script does not
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ArgumentError, match=r"its activation 'gelu_pytorch_tanh': the page runs gelu and gelu_new"):
        model_spec(models.load(folder))
