"""The Chinese site's navigation: an entry says （英文） exactly when every page under it is in English
only (no .zh.md beside it), and no entry shows an English title untranslated."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


class _Loader(yaml.SafeLoader):
    """mkdocs.yml as data: its !!python/name tags read as their text."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: suffix)


def _pages(entry: object) -> list[str]:
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, list):
        return [page for item in entry for page in _pages(item)]
    assert isinstance(entry, dict) and len(entry) == 1
    return _pages(next(iter(entry.values())))


def _entries(nav: list[object]):
    """Every entry: (its title or None, what it holds), sections and their pages alike."""
    for item in nav:
        if isinstance(item, str):
            yield None, item
            continue
        ((title, held),) = item.items()
        yield title, held
        if isinstance(held, list):
            yield from _entries(held)


def test_the_chinese_navigation_marks_exactly_the_english_only_entries():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)
    i18n = next(p["i18n"] for p in config["plugins"] if isinstance(p, dict) and "i18n" in p)
    translated = next(lang for lang in i18n["languages"] if lang["locale"] == "zh")["nav_translations"]
    checked = 0
    for title, held in _entries(config["nav"]):
        english_only = all(not (ROOT / "docs" / page.replace(".md", ".zh.md")).exists() for page in _pages(held))
        if title is None:  # a page named by its own title: its Chinese page's title, so it must have one
            assert not english_only, f"{held}: English only, shown by its English title; give it a title"
            continue
        assert title in translated, f"{title}: no Chinese title"
        assert translated[title].endswith("（英文）") == english_only, (title, translated[title])
        checked += 1
    assert checked >= 20
