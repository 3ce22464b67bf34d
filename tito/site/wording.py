"""The pages' wording, read from ``templates/wording.yaml`` and ``templates/milestones.yaml``:
Python lays a page out, these files say what it says."""

from __future__ import annotations

from functools import cache

from .links import TEMPLATES


@cache
def _load(name: str) -> dict:
    import yaml  # PyYAML comes with jupytext

    return yaml.safe_load((TEMPLATES / f"{name}.yaml").read_text(encoding="utf-8")) or {}


def words(*keys: str, **fields) -> str:
    """The text at ``keys`` in wording.yaml, its {fields} filled in."""
    node = _load("wording")
    for key in keys:
        node = node[key]
    return node.format(**fields) if fields else node


def tier_story(tier: str) -> str:
    return _load("wording")["tier_stories"].get(tier, "")


def command_rows() -> list[list[str]]:
    return _load("wording")["module"]["commands"]


def milestone_words() -> dict:
    return _load("milestones")
