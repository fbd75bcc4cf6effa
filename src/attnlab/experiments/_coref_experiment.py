"""``coref``: does 他 attend to 小明? The model of :mod:`._coref` trained (300 steps quick, 5000
full: the full run is builtin:coref), then its held-out accuracy, every head's mean weight
from the pronoun to the referent, and the answering head on the article's sentence."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import Array
from . import _coref
from ._common import Experiment, figure, progress_bar

__all__ = ["COREF_STEPS", "EXPERIMENT", "Coreference", "measure"]

COREF_STEPS = {"quick": 300, "full": 5000}
ARTICLE_SENTENCE, ARTICLE_NAME = "小明是个运动达人，他平时很爱打篮球", "小明"


@dataclass(frozen=True)
class Coreference:
    seed: int
    quick: bool
    steps: int
    model: _coref.CorefModel
    held_out_accuracy: float  # on 2000 held-out sentences
    losses: list[float]  # the training loss of every step
    train_seconds: float
    per_head: Array  # (layers, heads): the mean weight pronoun → referent on 500 held-out sentences
    article_weight: float  # 他 → 小明 in the answering head, on the article's sentence

    def metrics(self) -> dict[str, Any]:
        layer, head = _coref.HEAD
        return {"held_out_accuracy": self.held_out_accuracy, "article_weight": self.article_weight,
                "answer_head_mean_weight": float(self.per_head[layer, head]), "per_head": self.per_head.tolist(),
                "steps": self.steps, "train_seconds": self.train_seconds, "final_loss": self.losses[-1]}  # fmt: skip


def measure(quick: bool, seed: int, *, steps: int | None = None, batch: int = 64) -> Coreference:
    """_coref.train for ``steps`` steps (COREF_STEPS) of ``batch`` sentences, then the weights
    pronoun → referent of every head on 500 held-out sentences and on the article's."""
    steps = steps if steps is not None else COREF_STEPS["quick" if quick else "full"]
    model, trained = _coref.train(steps, seed=seed, batch=batch, progress=progress_bar("coref", steps))
    index = {c: i for i, c in enumerate(_coref.vocabulary())}
    held = _coref.examples(500, np.random.default_rng(seed + 2), held_out=True)
    per_head = _coref.antecedent_weights(model, held, index)  # (layers, heads)
    article = _coref.sentence_weight(model, ARTICLE_SENTENCE, ARTICLE_NAME, index)
    return Coreference(seed, quick, steps, model, trained["held_out_accuracy"], trained["losses"],
                       trained["seconds"], per_head, article)  # fmt: skip


def save(measured: Coreference, out: Path) -> None:
    """The trained model, a Hugging Face BERT checkpoint, in out/model."""
    _coref.save(measured.model, out / "model")


def figures(measured: Coreference, out: Path) -> list[str]:
    """loss.png (the training loss) and heads.png (pronoun → referent per layer and head)."""
    losses, per_head = measured.losses, measured.per_head
    drawn, (ax,) = figure()
    smooth = np.convolve(losses, np.ones(20) / 20, mode="valid") if len(losses) > 40 else losses
    ax.plot(losses, color="#ccc", label="loss")
    ax.plot(np.arange(len(smooth)) + (len(losses) - len(smooth)), smooth, label="mean of 20 steps")
    ax.set_xlabel("step")
    ax.set_ylabel("−log weight on the referent")
    ax.set_yscale("log")
    ax.legend()
    drawn.savefig(out / "loss.png", dpi=120)
    drawn, (ax,) = figure(size=(5.0, 2.5))
    image = ax.imshow(per_head, cmap="viridis", vmin=0, vmax=1)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(per_head.shape[1]))
    ax.set_yticks(range(per_head.shape[0]))
    ax.set_title("mean weight, pronoun → referent")
    drawn.colorbar(image, ax=ax)
    drawn.savefig(out / "heads.png", dpi=120)
    return ["loss.png", "heads.png"]


def _verdicts(measured: Coreference) -> tuple[str, str]:
    """What it shows, in English and in Chinese: learned (≥ 90% held out) or not yet."""
    layer, head = _coref.HEAD
    accuracy, mean, article = measured.held_out_accuracy, measured.per_head[layer, head], measured.article_weight
    others = float(np.delete(measured.per_head.ravel(), layer * measured.per_head.shape[1] + head).max())
    if accuracy >= 0.9:
        rest = (f"the other heads do not (at most {others:.0%}; they were not asked to)" if others < mean / 2
                else f"another head puts as much as {others:.0%} there too")  # fmt: skip
        return (
            f"Attention can carry a pronoun to the person it means: the answering head puts {mean:.0%} of the "
            f"pronoun's weight on the referent's name on average, and {article:.0%} from 他 to 小明 in the article's "
            f"sentence; {rest}. It gets {accuracy:.1%} of held-out "
            "sentences right: it learned gender and the trait–hobby link, not the pairs it saw.",
            f"注意力能把代词连到它所指的人：负责回答的那个头平均把代词 {mean:.0%} 的权重放在所指之人的名字上；"
            f"在文章的例句里，“他”对“小明”的权重是 {article:.0%}。模型在没见过的“名字—爱好”组合上答对 {accuracy:.1%}。",
        )
    return (
        f"After {measured.steps} steps the answering head puts {mean:.0%} of the pronoun's weight on the referent and "
        f"the model gets {accuracy:.1%} of held-out sentences right: it has started to learn, not finished "
        "(the full run trains longer).",
        f"训练 {measured.steps} 步后，回答头把 {mean:.0%} 的权重放在所指之人身上，答对 {accuracy:.1%}："
        "还没学完（完整运行训练更久）。",
    )


def report(measured: Coreference) -> str:
    """report.md: the task, the results table, every head's weight on the referent, what it shows."""
    layer, head = _coref.HEAD
    per_head = measured.per_head
    rows = [
        "| | value |", "|---|---|",
        f"| training steps (batch 64) | {measured.steps} |",
        f"| held-out accuracy (2000 sentences, unseen name–hobby pairs) | {measured.held_out_accuracy:.3f} |",
        f"| weight 他 → 小明 in layer {layer}, head {head}, on the article's sentence "
        f"| {measured.article_weight:.3f} |",
        f"| mean weight pronoun → referent in that head (500 held-out sentences) | {per_head[layer, head]:.3f} |",
        f"| training time | {measured.train_seconds:.0f} s |",
    ]  # fmt: skip
    heads = "\n".join(f"| {i} | " + " | ".join(f"{w:.3f}" for w in row) + " |" for i, row in enumerate(per_head))
    verdict_en, verdict_zh = _verdicts(measured)
    return f"""# coref: does 他 attend to 小明?

The article's example sentence, 小明是个运动达人，他平时很爱打篮球, as a task: sentences with one
to three people (小明是个运动达人，小红是个画家，…), then 他/她平时很爱 and a hobby. The pronoun's gender
and the hobby (each trait has its own) pick out one person. A 2-layer, 4-head BERT-shaped encoder
(attnlab.nn) is trained so that the weights of one head, layer {layer} head {head}, are its answer:
the loss is −log of the weight from the pronoun to the referent's characters. Held-out sentences
pair names and hobbies that training never paired. Seed {measured.seed}, {"quick" if measured.quick else "full"} run.

{chr(10).join(rows)}

Mean weight from the pronoun to its referent's characters, per layer (rows) and head (columns),
on held-out sentences:

| layer | {" | ".join(f"head {h}" for h in range(per_head.shape[1]))} |
|---|{"---|" * per_head.shape[1]}
{heads}

![loss](loss.png)

![pronoun → referent, per head](heads.png)

**What it shows.** {verdict_en}

**结论。** {verdict_zh}
"""


EXPERIMENT = Experiment(
    "coref", "他 → 小明: a model that resolves the article's pronoun in one attention head", measure, figures, report,
    save,
)  # fmt: skip
