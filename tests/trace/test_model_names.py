"""A model by its name, never its path (attnlab.trace._display.shown_name): the one rule
that traces, pages, plots and tables name a checkpoint by, and a model's trace that holds
no folder of the machine, in its JSON, its text and its page."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

import attnlab as al
import traces
from attnlab.trace import ModelTrace
from attnlab.trace._display import shown_name


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("gpt2", "gpt2"),  # a hub id, as it is
        ("Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B"),
        ("builtin:coref", "builtin:coref"),
        ("/home/ann/models/SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"),  # a file's name
        ("/home/ann/checkpoints/minilm/", "minilm"),  # a folder's, its trailing separator dropped
        ("~/models/gpt2-small", "gpt2-small"),
        ("C:\\Users\\ann\\models\\tiny-llama", "tiny-llama"),  # read on another machine: still a path
        ("/cache/hub/models--Qwen--Qwen2.5-0.5B/snapshots/0123abcd", "Qwen/Qwen2.5-0.5B"),  # the hub id it holds
        ("/cache/hub/models--gpt2/snapshots/0123abcd/", "gpt2"),
        ("/cache/hub/models--org--name/snapshots/0123abcd/model.Q4_0.gguf", "org/name/model.Q4_0.gguf"),
    ],
)
def test_a_model_is_shown_by_its_hub_id_or_its_folder_or_file_name(name, shown):
    assert shown_name(name) == shown


def test_a_relative_folder_that_exists_is_shown_by_its_name_and_the_working_folder_by_its_own(tmp_path, monkeypatch):
    (tmp_path / "runs" / "tiny").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert shown_name("runs/tiny") == "tiny"  # one "/" is a hub id's form, but the folder is there
    assert shown_name(".") == tmp_path.name and shown_name("./runs/tiny/") == "tiny"
    assert shown_name("org/model") == "org/model"  # no such folder: a hub id


def test_a_model_trace_of_a_path_holds_its_name_in_its_json_text_and_page(tmp_path):
    folder = tmp_path / "checkpoints" / "tiny-bart"
    trace = replace(traces.encoder_decoder(), model=str(folder))  # as attnlab.models.load(folder) names it
    assert trace.model == "tiny-bart"
    saved = trace.to_json()
    assert json.loads(saved)["model"] == "tiny-bart" and str(tmp_path) not in saved
    assert str(tmp_path) not in trace.render(lang="en") and "tiny-bart" in trace.render(lang="en")
    page = tmp_path / "page.html"
    al.view(trace, page)
    html = page.read_text(encoding="utf-8")
    assert str(tmp_path) not in html and '"model": "tiny-bart"' in html


def test_a_trace_saved_with_a_path_on_another_machine_reads_back_with_its_name():
    data = json.loads(traces.encoder_decoder().to_json())
    data["model"] = os.path.join(os.sep, "srv", "ann", "models", "tiny-bart")  # no such folder here
    assert ModelTrace.from_dict(data).model == "tiny-bart"
