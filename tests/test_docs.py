"""Every Python example in the README and in docs/ runs. The blocks of one file run in order
in one namespace, so a page can build its example up step by step."""

import linecache
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


# The guide's examples (~45 s: they train and compile) run in the slow set, which CI runs too.
@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p.name == "guide.md"
                                  else p for p in PAGES], ids=lambda p: p.name)
def test_every_example_on_the_page_runs(page, capsys):
    code = blocks(page)
    assert code, f"{page.name} has no Python example"
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for i, block in enumerate(code):
        filename = f"{page.name} example {i + 1}"
        # as if the block were a file, so error messages can quote its lines
        linecache.cache[filename] = (len(block), None, block.splitlines(True), filename)
        exec(compile(block, filename, "exec"), namespace)


API_NAMESPACES = ["eager", "eager.functional", "eager.module", "eager.optimizer", "eager.autodiff",
                  "eager.amp", "eager.random", "eager.distributed", "eager.distributed.functional",
                  "eager.data", "eager.data.dataset", "eager.data.transform", "eager.hub",
                  "eager.quantization",
                  "partial"]


def test_the_api_reference_lists_every_public_name_and_nothing_else():
    import importlib

    text = (ROOT / "docs" / "api.md").read_text()
    sections = dict(re.findall(r"^## `([\w.]+)`\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M))
    assert sorted(sections) == sorted(API_NAMESPACES)
    for name in API_NAMESPACES:
        listed = set(re.findall(r"^- `(\w+)", sections[name], flags=re.M))
        public = set(importlib.import_module(name).__all__)
        assert public - listed == set(), f"docs/api.md: add to `{name}`: {sorted(public - listed)}"
        assert listed - public == set(), f"docs/api.md: `{name}` has no {sorted(listed - public)}"
