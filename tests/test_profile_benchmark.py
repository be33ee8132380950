"""The perf-sampled profile benchmark: the perf output it reads, its arithmetic, its tables."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ lives next to the package
    sys.path.insert(0, str(ROOT))

from benchmarks import profile  # noqa: E402

pytestmark = pytest.mark.timeout(120)

REPORT = """\
# comment lines and the header perf prints are skipped
 24.03% | 9627       |libpython3.11.so.1.0                             |[.] _PyEval_EvalFrameDefault
 6.78%  | 2717       |libm.so.6                                        |[.] fetestexcept
 2.05%  | 821        |libpython3.11.so.1.0                             |[.] _PyObject_GenericGetAttrWithDict
 0.43%  | 172        |_greenlet.cpython-311-x86_64-linux-gnu.so        |[.] greenlet::Greenlet::g_switchstack
 0.40%  | 160        |_multiarray_umath.cpython-311-x86_64-linux-gnu.so|[.] PyArray_Scalar
 0.01%  | 3          |[kernel.kallsyms]                                |[k] do_syscall_64
 0.01%  | 2          |libpython3.11.so.1.0                             |[.] _PyEval_EvalFrameDefault
"""


def test_parse_report_reads_samples_per_library_and_function() -> None:
    samples = profile.parse_report(REPORT)
    assert samples[("libpython3.11.so.1.0", "_PyEval_EvalFrameDefault")] == 9629  # a function listed twice adds up
    assert samples[("_greenlet.cpython-311-x86_64-linux-gnu.so", "greenlet::Greenlet::g_switchstack")] == 172
    assert samples[("[kernel.kallsyms]", "do_syscall_64")] == 3
    assert len(samples) == 6
    assert profile.parse_report("nothing perf would print\n") == {}


def test_functions_are_grouped_by_library_with_the_interpreter_loop_apart() -> None:
    assert profile.group_of("libpython3.11.so.1.0", "_PyEval_EvalFrameDefault").startswith("CPython: interpreter")
    assert profile.group_of("libpython3.11.so.1.0", "PyType_IsSubtype") == "CPython: the rest"
    assert profile.group_of("_multiarray_umath.cpython-311-x86_64-linux-gnu.so", "PyArray_Scalar") == "numpy"
    assert profile.group_of("libscipy_openblas64_-32a4b2a6.so", "sdot_k") == "BLAS"
    assert profile.group_of("libpaddle.so", "phi::MatmulKernel") == "Paddle"
    assert profile.group_of("libm.so.6", "fetestexcept") == "libm"
    assert profile.group_of("[kernel.kallsyms]", "do_syscall_64") == "kernel"
    assert profile.group_of("ld-linux-x86-64.so.2", "_dl_lookup_symbol_x") == "other"


def test_a_window_turns_sample_shares_into_ns_per_env_step() -> None:
    window = profile.Window({("a", "f"): 300, ("b", "g"): 100}, steps=1_000, cpu_s=0.004)
    ns = window.ns_per_step()  # 4 ms of CPU over 1000 env steps: 4000 ns per step, split 3:1
    assert ns == {("a", "f"): pytest.approx(3000.0), ("b", "g"): pytest.approx(1000.0)}
    assert profile.by_group({("libpython3.11.so.1.0", "x"): 5.0, ("libpython3.11.so.1.0", "y"): 2.0}) == {
        "CPython: the rest": 7.0
    }
    with pytest.raises(ValueError, match="needs samples and env steps"):
        profile.Window({}, steps=10, cpu_s=1.0).ns_per_step()
    with pytest.raises(ValueError, match="needs samples and env steps"):
        profile.Window({("a", "f"): 1}, steps=0, cpu_s=1.0).ns_per_step()


def test_markdown_puts_rows_side_by_side_with_the_agent_path_s_difference_to_the_floor() -> None:
    loop = ("libpython3.11.so.1.0", "_PyEval_EvalFrameDefault")
    switch = ("_greenlet.so", "g_switchstack")
    ns = {
        "vector": {loop: 2000.0},
        "floor": {loop: 1700.0, switch: 60.0},
        "coroutines": {loop: 2450.0, switch: 50.0},
    }
    md = profile.markdown(64, 4.0, ns, top=2)
    assert "| CPython: interpreter loop (the bytecodes) | 2000 | 1700 | 2450 | +750 |" in md
    assert "| greenlet | 0 | 60 | 50 | -10 |" in md
    assert "| total | 2000 | 1760 | 2500 | +740 |" in md
    assert "| libpython3.11.so.1.0 | `_PyEval_EvalFrameDefault` | 1700 | 2450 | +750 |" in md
    # Without the floor there is nothing to take the difference to.
    assert "agent path - floor" not in profile.markdown(64, 4.0, {"vector": {loop: 1.0}})


@pytest.mark.skipif(shutil.which("perf") is None, reason="needs perf")
def test_a_sampled_window_sees_the_rounds_it_ran(tmp_path: Path) -> None:
    def one_round() -> int:
        sum(i * i for i in range(2_000))  # pure-Python work: the interpreter loop's samples
        return 1

    try:
        window = profile.sample_rounds(one_round, 0.5, tmp_path)
    except RuntimeError as exc:  # perf is there but may not sample here (perf_event_paranoid)
        pytest.skip(f"perf cannot sample this process: {exc}")
    assert window.steps > 0 and window.cpu_s > 0
    groups = profile.by_group(window.ns_per_step())
    assert max(groups, key=lambda g: groups[g]).startswith("CPython")


def test_a_failed_perf_run_says_what_perf_said() -> None:
    import subprocess

    proc = subprocess.Popen(["sh", "-c", "echo 'no access to perf events' >&2; exit 3"], stderr=subprocess.PIPE)
    with pytest.raises(RuntimeError, match="exit 3.*no access to perf events"):
        profile.finish_perf(proc, 1.0)


def test_sample_row_knows_its_rows(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="row must be one of"):
        profile.sample_row("threads", 4, 0.1, tmp_path)


@pytest.mark.skipif(shutil.which("perf") is None, reason="needs perf")
def test_the_agent_path_s_window_counts_its_steps_and_samples(tmp_path: Path) -> None:
    try:
        window = profile.sample_row("coroutines", 4, 0.5, tmp_path)
    except RuntimeError as exc:  # perf is there but may not sample here (perf_event_paranoid)
        pytest.skip(f"perf cannot sample this process: {exc}")
    assert window.steps > 0 and window.cpu_s > 0 and sum(window.samples.values()) > 0
    assert sum(window.ns_per_step().values()) == pytest.approx(window.cpu_s * 1e9 / window.steps)


def test_main_refuses_windows_that_measure_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        profile.main(["--seconds", "0"])
    assert "--seconds positive" in capsys.readouterr().err
