"""Every ```python block of docs/computation_group.md and docs/agent_group.md runs as written, on its own."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
COMPUTATION_DOC = DOCS / "computation_group.md"
AGENT_DOC = DOCS / "agent_group.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def _blocks(doc: Path) -> list[tuple[str, str]]:
    text = doc.read_text(encoding="utf-8")
    out = []
    for match in _BLOCK.finditer(text):
        # Headings of the page before this block; comments inside earlier code blocks are not headings.
        prose = _FENCE.sub("", text[: match.start()])
        headings = re.findall(r"^#+ (.+)$", prose, re.MULTILINE)
        section = re.sub(r"\W+", "_", headings[-1]).strip("_").lower() if headings else "top"
        out.append((f"{doc.stem}:{len(out)}_{section}", match.group(1)))
    return out


def _sections(doc: Path) -> set[str]:
    return {name.split(":", 1)[1].split("_", 1)[1] for name, _ in _blocks(doc)}


BLOCKS = [(name, doc, code) for doc in (COMPUTATION_DOC, AGENT_DOC) for name, code in _blocks(doc)]


def test_the_computation_doc_has_an_example_for_each_part() -> None:
    sections = _sections(COMPUTATION_DOC)
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
        "dqn",
    ):
        assert part in sections, f"no example under the section {part!r}"


def test_the_agent_doc_has_an_example_for_each_part() -> None:
    sections = _sections(AGENT_DOC)
    for part in ("agent", "agenthelper", "communicator", "computationwrapper", "manager", "runtimes", "failures"):
        assert part in sections, f"no example under the section {part!r}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("doc", "code"), [(doc, code) for _, doc, code in BLOCKS], ids=[n for n, _, _ in BLOCKS])
def test_doc_example_runs(doc: Path, code: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = set(threading.enumerate())
    namespace: dict[str, object] = {"__name__": "__doc_example__"}
    exec(compile(code, str(doc), "exec"), namespace)
    capsys.readouterr()  # the examples print to show results; what matters is that their asserts hold
    # An example that runs agents leaves no thread behind.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and set(threading.enumerate()) - before:
        time.sleep(0.05)
    assert not {t.name for t in set(threading.enumerate()) - before}
