"""The view a page opens on when nobody chose one (attnlab.trace._opening): a config's
answering head; else, causal, the last token of the text on the strongest previous-token
head; else the first layer, head 0, query 0."""

import numpy as np

import attnlab as al
from attnlab.trace import ModelTrace
from attnlab.viz._page import opening


def _causal_trace(heads: int = 3, length: int = 6):
    return al.MultiheadAttention(6, heads, seed=1, dtype=np.float64).trace(np.eye(length, 6), is_causal=True)


def test_a_causal_head_opens_on_the_last_token_of_the_strongest_previous_token_head():
    trace = _causal_trace()
    A = trace.weights  # (H, L, L)
    previous = [np.mean([A[h, i, i - 1] for i in range(1, A.shape[-1])]) for h in range(A.shape[0])]  # by hand
    assert opening(trace) == {"layer": 0, "head": int(np.argmax(previous)), "query": A.shape[-1] - 1}


def test_a_model_trace_opens_on_the_layer_and_head_of_the_largest_score_never_on_query_0():
    layers = {0: _causal_trace(), 1: _causal_trace()}
    A = np.stack([layers[i].weights for i in (0, 1)])  # (layers, H, L, L)
    A[1, 2] = np.tril(np.ones((6, 6))) / np.arange(1, 7)[:, None]  # layer 1, head 2: uniform over the past
    A[1, 2, 1:] = 0.0
    A[1, 2, np.arange(1, 6), np.arange(0, 5)] = 1.0  # ... then all on the previous token: score 1
    A[1, 2, 0, 0] = 1.0
    layers[1].weights = A[1]
    tokens = ["<s>", "a", "b", "c", "d", "</s>"]
    trace = ModelTrace("m", list(range(6)), tokens, layers, 2, 3, special=[True, False, False, False, False, True])
    assert opening(trace) == {"layer": 1, "head": 2, "query": 4}  # the last token neither special nor template
    trace.template = [False, False, False, True, True, False]  # a chat template's tokens do not count either
    assert opening(trace)["query"] == 2
    trace.opens = {"layer": 0, "head": 1, "query": 3}  # a config's answering head wins
    assert opening(trace) == {"layer": 0, "head": 1, "query": 3}


def test_an_encoders_head_still_opens_on_the_first_layer_head_0_query_0():
    trace = al.MultiheadAttention(6, 3, seed=1, dtype=np.float64).trace(np.eye(6))
    assert opening(trace) == {"layer": 0, "head": 0, "query": 0}


def test_smollm2_opens_on_its_last_token_on_a_previous_token_head():
    """The real causal model: never query 0, the head the head detector ranks first as previous-token."""
    import sys

    sys.path.insert(0, "tests")
    from attnlab import analysis, runner
    from checkpoints import smollm2_gguf

    model = runner.load_model(str(smollm2_gguf()))
    trace = model.trace("The cat sat on the mat.", chat=True)  # the template's tokens after it
    opens = opening(trace)
    previous = analysis.head_types(trace).scores["previous"]  # (layers, H)
    assert (opens["layer"], opens["head"]) == np.unravel_index(int(np.argmax(previous)), previous.shape)
    assert trace.tokens[opens["query"]].strip() == "." and opens["query"] > 0


def test_the_statistics_page_opens_on_the_dense_weights_strongest_previous_token_head_at_the_last_text_token():
    from attnlab.engine import attention_statistics
    from attnlab.trace import ModelStatistics
    from attnlab.trace._opening import telling_statistics_view

    rng, L = np.random.default_rng(3), 12
    q, k = rng.standard_normal((2, 3, L, 8)), rng.standard_normal((2, 3, L, 8))  # (layers, heads, L, E)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(8)
    scores[..., np.triu_indices(L, 1)[0], np.triu_indices(L, 1)[1]] = -np.inf  # causal
    dense = np.exp(scores - scores.max(-1, keepdims=True))
    dense /= dense.sum(-1, keepdims=True)  # (layers, heads, L, L)
    previous = np.array([[np.mean([dense[n, h, i, i - 1] for i in range(1, L)]) for h in range(3)] for n in range(2)])
    layer, head = np.unravel_index(np.argmax(previous), previous.shape)
    marks = {"special": [True] + [False] * (L - 2) + [True]}  # [CLS] … [SEP]: the last text token is L − 2
    causal = ModelStatistics.from_layers(
        [attention_statistics(q[n], k[n], is_causal=True) for n in range(2)],
        model="m", ids=list(range(L)), tokens=[f"t{i}" for i in range(L)], **marks,
    )  # fmt: skip
    assert telling_statistics_view(causal) == {"layer": layer, "head": head, "query": L - 2}
    both_ways = ModelStatistics.from_layers(
        [attention_statistics(q[n], k[n]) for n in range(2)], model="m", ids=list(range(L)),
        tokens=[f"t{i}" for i in range(L)], **marks,
    )  # fmt: skip
    assert telling_statistics_view(both_ways) == {}  # an encoder's: rule 3, the caller's first view
