"""Every ```python block of docs/computation_group.md runs as written, on its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "computation_group.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks() -> list[tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    out = []
    for match in _BLOCK.finditer(text):
        headings = re.findall(r"^#+ (.+)$", text[: match.start()], re.MULTILINE)
        section = re.sub(r"\W+", "_", headings[-1]).strip("_").lower() if headings else "top"
        out.append((f"{len(out)}_{section}", match.group(1)))
    return out


BLOCKS = _blocks()


def test_the_doc_has_an_example_for_each_part() -> None:
    sections = {name.split("_", 1)[1] for name, _ in BLOCKS}
    for part in (
        "layers_and_layerfunc",
        "model",
        "algorithm",
        "computationtask",
        "sharing_and_cloning",
        "parameter_sync",
        "specs_and_error_messages",
        "thread_safety",
        "save_and_load",
    ):
        assert part in sections, f"no example under the section {part!r}"


@pytest.mark.parametrize("code", [code for _, code in BLOCKS], ids=[name for name, _ in BLOCKS])
def test_doc_example_runs(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, object] = {"__name__": "__doc_example__"}
    exec(compile(code, str(DOC), "exec"), namespace)
    capsys.readouterr()  # the examples print to show results; what matters is that their asserts hold
