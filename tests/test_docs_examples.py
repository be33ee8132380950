"""Every ```python block of docs/computation_group.md and docs/agent_group.md runs as written, on its own.

The scripts of docs/getting_started.md run as its reader runs them: saved under the names the page
gives, then executed with the venv's Python in a fresh directory.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
COMPUTATION_DOC = DOCS / "computation_group.md"
AGENT_DOC = DOCS / "agent_group.md"
GETTING_STARTED = DOCS / "getting_started.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def _blocks(doc: Path) -> list[tuple[str, str]]:
    text = doc.read_text(encoding="utf-8")
    out: list[tuple[str, str]] = []
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
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and set(threading.enumerate()) - before:
        time.sleep(0.05)
    assert not {t.name for t in set(threading.enumerate()) - before}


def _scripts(doc: Path) -> dict[str, str]:
    """File name -> code of each ```python block, named by the last `*.py` the prose before the block mentions."""
    text = doc.read_text(encoding="utf-8")
    scripts: dict[str, str] = {}
    prose_start = 0
    for match in _FENCE.finditer(text):
        names = re.findall(r"`(\w+\.py)`", text[prose_start : match.start()])
        block = _BLOCK.match(text, match.start())
        if block is not None:
            assert names, f"{doc.name}: a python block at offset {match.start()} is not given a file name"
            scripts[names[-1]] = block.group(1)
        prose_start = match.end()
    return scripts


def _run_script(cwd: Path, *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=100, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, f"python {' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def getting_started_dir(tmp_path: Path) -> Path:
    """A fresh directory holding the scripts of the getting-started page, saved as the page says."""
    scripts = _scripts(GETTING_STARTED)
    assert set(scripts) == {"train_cartpole.py", "evaluate.py"}, "a new script on the page needs a test here"
    for name, code in scripts.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    return tmp_path


@pytest.mark.timeout(120)
def test_getting_started_train_then_evaluate(getting_started_dir: Path) -> None:
    """`python train_cartpole.py <budget>` then `python evaluate.py`, with a budget of one evaluation."""
    out = _run_script(getting_started_dir, "train_cartpole.py", "5200")
    # The whole budget, unless the evaluation at 5,000 steps solved CartPole and ended the run there
    # (the script seeds nothing, and PPO sometimes scores 475+ that early).
    ran = re.search(r"(\d+) env steps, \d+ episodes in \d+ s; solved: (True|False)", out)
    assert ran is not None, out
    steps, solved = int(ran.group(1)), ran.group(2) == "True"
    assert steps == 5200 or (solved and 5000 <= steps <= 5200), out
    assert "mean prediction batch" in out
    greedy = re.search(r"greedy return over 20 episodes: (\S+)", out)
    assert greedy is not None and math.isfinite(float(greedy.group(1)))
    run = getting_started_dir / "runs" / "my_cartpole"
    assert (run / "task.ckpt").exists()
    assert (run / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    out = _run_script(getting_started_dir, "evaluate.py")
    mean = re.search(r"mean greedy return over 20 episodes: (\S+)", out)
    assert mean is not None, out
    assert math.isfinite(float(mean.group(1))) and float(mean.group(1)) >= 1.0  # a CartPole episode scores >= 1


@pytest.mark.timeout(60)
def test_getting_started_script_with_a_budget_below_the_first_evaluation(getting_started_dir: Path) -> None:
    out = _run_script(getting_started_dir, "train_cartpole.py", "600")
    assert "600 env steps" in out
    assert (getting_started_dir / "runs" / "my_cartpole" / "learning_curve.png").exists()


@pytest.mark.timeout(120)
def test_the_readme_example_runs_from_the_repository_root(capsys: pytest.CaptureFixture[str]) -> None:
    readme = DOCS.parent / "README.md"
    blocks = [code for _, code in _blocks(readme)]
    assert len(blocks) == 1, "the README has one Python example"
    code = blocks[0]
    assert "max_steps=50_000" in code
    # The same program with a smaller budget (the reader's run takes a few seconds more).
    exec(compile(code.replace("max_steps=50_000", "max_steps=2_000"), "README.md", "exec"), {"__name__": "__readme__"})
    mean_return, mean_batch = capsys.readouterr().out.split()
    assert float(mean_return) > 0 and float(mean_batch) > 1
