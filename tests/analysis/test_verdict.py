"""Did it get faster? Verdicts between two runs, and the CI gate, proven on samples with known answers.

Generated samples with a known change must be found (at the power printed), samples
from one distribution must give false alarms at or below the interval's rate, skewed
and heavy-tailed noise included; the gate's exit codes follow; ``diff`` prints the
verdicts in every format.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_builders import op, write_trace

from neuronprof.analysis import TraceDiff, check, diff, load_trace, shift
from neuronprof.analysis._verdict import min_samples
from neuronprof.cli import main as analysis_main

# -- the statistics ----------------------------------------------------------------------


@pytest.mark.slow
def test_p_values_are_scipys_exact_mann_whitney() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(7)
    for _ in range(40):
        a = [rng.lognormvariate(0, 0.3) for _ in range(rng.randint(2, 12))]
        b = [rng.lognormvariate(rng.choice([0, 0.3]), 0.3) for _ in range(rng.randint(2, 12))]
        expected = stats.mannwhitneyu(b, a, method="exact").pvalue
        assert shift(a, b).p_value == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_the_interval_holds_the_estimate_and_a_scale_change_moves_it_exactly() -> None:
    rng = random.Random(3)
    a = [rng.lognormvariate(0, 0.2) for _ in range(9)]
    b = [v * 1.5 for v in a]
    s = shift(a, b)
    assert s.ratio == pytest.approx(1.5)  # every pairwise ratio's median: exact for a pure scale change
    assert s.low is not None and s.high is not None and s.low <= s.ratio <= s.high
    assert s.verdict == "slower" and "slower by 50.0%" in s.describe()
    assert shift(b, a).verdict == "faster"


def _listed(a: list[float], b: list[float], confidence: float) -> tuple[object, ...]:
    """The estimate, interval and U by definition: every pairwise log ratio listed and sorted."""
    import math

    from neuronprof.analysis._verdict import _lower_rank

    diffs = sorted(math.log(y) - math.log(x) for x in a for y in b)
    mid = len(diffs) // 2
    centre = diffs[mid] if len(diffs) % 2 else (diffs[mid - 1] + diffs[mid]) / 2
    k = _lower_rank(len(a), len(b), 1 - confidence)
    ends = (math.exp(diffs[k - 1]), math.exp(diffs[-k])) if k else (None, None)
    u = sum(1.0 if d > 0 else 0.5 if d == 0 else 0.0 for d in diffs)
    return (math.exp(centre), *ends, u)


_times = st.one_of(
    st.sampled_from([1.0, 2.0, 3.0, 1e-150, 1e150]),  # ties, and logs far apart (every ratio a float)
    st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False, exclude_min=True),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    a=st.lists(_times, min_size=1, max_size=120),  # up to 14,400 pairs: listed (up to 4,096), else selected
    b=st.lists(_times, min_size=1, max_size=120),
    confidence=st.sampled_from([0.5, 0.9, 0.95, 0.99]),
)
def test_the_estimate_and_interval_are_the_listed_pairwise_ratios_order_statistics(
    a: list[float], b: list[float], confidence: float
) -> None:
    # shift() selects them without listing the m*n ratios; listed, they must be the same floats.
    from neuronprof.analysis._verdict import _u_cdf

    s = shift(a, b, confidence=confidence)
    ratio, low, high, u = _listed(a, b, confidence)
    assert (s.ratio, s.low, s.high) == (ratio, low, high)
    m, n = len(a), len(b)
    assert s.p_value == min(1.0, 2 * min(_u_cdf(u, m, n), 1 - _u_cdf(math.ceil(u) - 1, m, n)))


def test_a_ratio_past_the_largest_float_is_infinite_not_an_error() -> None:
    s = shift([1e-300] * 5, [1e300] * 5)
    assert s.ratio == math.inf and s.verdict == "slower"
    assert "cannot tell" not in s.describe()


def test_a_long_sample_is_judged_without_listing_its_pairs() -> None:
    # 20,000 a side: 4e8 pairwise ratios, 3.2 GB as floats; selected, they need a few arrays of 20,000.
    rng = random.Random(5)
    a = [rng.lognormvariate(0, 0.1) for _ in range(20_000)]
    b = [v * 1.02 for v in a]
    s = shift(a, b)
    assert s.ratio == pytest.approx(1.02) and s.verdict == "slower"
    assert s.low is not None and s.high is not None and s.low < 1.02 < s.high


def test_one_small_side_against_many_gets_the_exact_interval() -> None:
    # 1 sample against 3,000: U is uniform on 0..3000, so 95 % holds k = 75; the normal
    # approximation found none and said "cannot tell".
    rng = random.Random(9)
    many = [rng.lognormvariate(0, 0.1) for _ in range(3000)]
    s = shift([2.0], many)
    assert s.verdict == "faster" and s.low is not None
    from neuronprof.analysis._verdict import _lower_rank

    assert _lower_rank(1, 3000, 0.05) == 75


@pytest.mark.parametrize("confidence", [0.95, 0.99])
def test_the_normal_approximation_is_used_only_where_its_interval_is_never_narrower(confidence: float) -> None:
    from neuronprof.analysis import _verdict

    def k_exact(m: int, n: int) -> int:
        counts, total, below = _verdict._u_counts(m, n), math.comb(m + n, m), 0
        for k, c in enumerate(counts):
            below += c
            if below / total > (1 - confidence) / 2:
                return k
        return m * n

    for m, n in [(10, 260), (10, 2000), (12, 300), (20, 130), (30, 90), (51, 51), (70, 70)]:
        assert not _verdict._exact(m, n)
        approx, exact = _verdict._lower_rank(m, n, 1 - confidence), k_exact(m, n)
        assert exact * 0.95 <= approx <= exact, (m, n, approx, exact)


def test_too_few_samples_cannot_tell_and_say_how_many_are_needed() -> None:
    need = min_samples(0.95)
    assert need == 4  # 3 against 3: no arrangement is rarer than 1 in 20
    s = shift([1.0, 1.1, 1.2], [2.0, 2.1, 2.2])
    assert s.verdict == "cannot tell" and s.low is None
    assert s.why_not is not None and "at least 4 on each side" in s.why_not
    assert shift([1.0, 1.1, 1.2, 1.05], [2.0, 2.1, 2.2, 2.05]).verdict == "slower"


def test_bad_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        shift([1.0, 0.0], [1.0])
    with pytest.raises(ValueError, match="confidence"):
        shift([1.0], [1.0], confidence=1.0)


def _noise(kind: str, rng: random.Random) -> float:
    """One multiplicative noise draw around 1: log-normal, right-skewed, or heavy-tailed."""
    if kind == "lognormal":
        return rng.lognormvariate(0, 0.1)
    if kind == "skewed":  # a step is now and then much slower, never much faster
        return 1 + rng.expovariate(1 / 0.08)
    return rng.paretovariate(2.5) ** 0.3  # heavy-tailed: rare steps several times the median


@pytest.mark.parametrize("kind", ["lognormal", "skewed", "heavy-tailed"])
def test_a_known_change_is_found_at_the_stated_power(kind: str) -> None:
    rng = random.Random(11)
    found = 0
    trials = 200
    for _ in range(trials):
        a = [_noise(kind, rng) for _ in range(10)]
        b = [1.25 * _noise(kind, rng) for _ in range(10)]
        found += shift(a, b).verdict == "slower"
    power = found / trials
    print(f"{kind}: a 25% slowdown found in {power:.0%} of {trials} trials (10 vs 10 samples)")
    assert power >= 0.8


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["lognormal", "skewed", "heavy-tailed"]),
    n_a=st.integers(4, 12),
    n_b=st.integers(4, 12),
    seed=st.integers(0, 2**32 - 1),
)
def test_one_distribution_gives_false_alarms_at_most_at_the_stated_rate(
    kind: str, n_a: int, n_b: int, seed: int
) -> None:
    rng = random.Random(seed)
    trials = 400
    alarms = sum(
        shift([_noise(kind, rng) for _ in range(n_a)], [_noise(kind, rng) for _ in range(n_b)]).verdict
        in ("slower", "faster")
        for _ in range(trials)
    )
    # The interval's level is 95 %, so at most 5 % false alarms (the exact interval is
    # conservative); 400 trials put 3 standard errors at ±3.3 %.
    print(f"{kind}, {n_a} vs {n_b} samples from one distribution: false alarms {alarms / trials:.1%} (bound 8.3%)")
    assert alarms / trials <= 0.05 + 0.033, (kind, n_a, n_b, alarms)


# -- samples from traces ---------------------------------------------------------------------


def _run_trace(path: Path, steps: list[float]) -> Path:
    """A trace of steps with the given durations (µs); an aten::mm of 80 % of each, an add of 10 %."""
    events = []
    t = 0.0
    for n, d in enumerate(steps):
        events += [
            op(f"ProfilerStep#{n + 1}", t, d, cat="user_annotation"),
            op("aten::mm", t + 0.05 * d, 0.8 * d),
            op("aten::add", t + 0.86 * d, 0.1 * d),
        ]
        t += d + 5
    return write_trace(path, events)


def _draw(rng: random.Random, n: int, scale: float) -> list[float]:
    return [round(1000 * scale * rng.lognormvariate(0, 0.05), 3) for _ in range(n)]


def test_each_step_is_a_sample_and_its_ops_add_up_to_it(tmp_path: Path) -> None:
    trace = load_trace(_run_trace(tmp_path / "a.json", [1000, 1200, 900]))
    assert [s.wall_us for s in trace.samples] == [1000, 1200, 900]
    for s in trace.samples:
        assert sum(cpu for _, cpu, _ in s.ops) == pytest.approx(s.wall_us)
        mm = s.op("aten::mm")
        assert mm is not None and mm[0] == pytest.approx(0.8 * s.wall_us)


def test_diff_gives_verdicts_for_the_step_and_the_ops_in_every_format(tmp_path: Path) -> None:
    rng = random.Random(5)
    a = _run_trace(tmp_path / "a.json", _draw(rng, 10, 1.0))
    b = _run_trace(tmp_path / "b.json", _draw(rng, 10, 1.3))
    d = diff(a, b)
    assert d.step is not None and d.step.verdict == "slower"
    mm = d.op_shift("aten::mm")
    assert mm is not None and mm.verdict == "slower" and mm.low is not None and mm.low > 1
    text = d.to_text()
    assert "verdict, step time (host): slower by" in text and "Verdict per step" in text
    assert "each step is a sample (10 and 10 steps, from 1 and 1 run(s))" in text
    assert "verdict, step time (host): slower by" in d.to_markdown()
    back = TraceDiff.from_json(d.to_json())
    assert back.step == d.step and back.op_shifts == d.op_shifts
    same = diff(a, a)
    assert same.step is not None and same.step.verdict == "no measurable change"


def test_ops_that_appear_or_vanish_are_listed_apart(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.json", [op("ProfilerStep#1", 0, 100, cat="user_annotation"), op("aten::mm", 1, 50)])
    b = write_trace(tmp_path / "b.json", [op("ProfilerStep#1", 0, 100, cat="user_annotation"), op("aten::bmm", 1, 50)])
    text = diff(a, b).to_text()
    assert "appeared in B (not in A): aten::bmm" in text
    assert "vanished (only in A): aten::mm" in text


def test_a_folder_of_runs_makes_each_run_a_sample(tmp_path: Path) -> None:
    rng = random.Random(9)
    for side, scale in (("a", 1.0), ("b", 1.0)):
        for run in range(5):
            # Each run has its own machine state: a run-wide factor, then step noise.
            factor = rng.choice([0.8, 1.0, 1.25])
            _run_trace(tmp_path / side / f"run{run}.pt.trace.json", _draw(rng, 6, scale * factor))
    d = diff(tmp_path / "a", tmp_path / "b")
    assert d.step is not None and (d.step.n_a, d.step.n_b) == (5, 5)
    assert any("each run's median step is a sample (5 and 5 runs)" in n for n in d.notes)


# -- the gate ---------------------------------------------------------------------------


def _gate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = analysis_main(["check", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_check_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(13)
    base = str(_run_trace(tmp_path / "base.json", _draw(rng, 10, 1.0)))
    slower = str(_run_trace(tmp_path / "slower.json", _draw(rng, 10, 1.2)))
    same = str(_run_trace(tmp_path / "same.json", _draw(rng, 10, 1.0)))
    short = str(_run_trace(tmp_path / "short.json", _draw(rng, 1, 1.0)))

    code, out = _gate(capsys, base, slower, "--max-slowdown", "5%")
    assert code == 1 and out.startswith("REGRESSION, step time (host): slower beyond 5%")
    code, out = _gate(capsys, base, slower, "--max-slowdown", "50%")
    assert code == 0 and out.startswith("ok, step time (host)")
    code, out = _gate(capsys, base, same, "--max-slowdown", "5%")
    assert code == 0 and out.startswith("ok, step time (host)")
    code, out = _gate(capsys, base, slower, "--ops", "aten::mm", "--ops", "aten::add")
    assert code == 1 and "REGRESSION, aten::mm self CPU time" in out and "aten::add self CPU time" in out
    code, out = _gate(capsys, base, short)
    assert code == 2 and "cannot tell, step time (host): 10 and 1 sample(s) are too few" in out
    code, out = _gate(capsys, base, slower, "--ops", "aten::nothing")
    assert code == 2 and "cannot tell, aten::nothing self CPU time" in out
    code, out = _gate(capsys, base, str(tmp_path / "missing.json"))
    assert code == 2 and "error" in out
    code, out = _gate(capsys, base, slower, "--markdown")
    assert code == 1 and out.startswith("### neuronprof check: ❌ regression") and "| step time (host) |" in out
    with pytest.raises(SystemExit) as bad:
        analysis_main(["check", base, slower, "--max-slowdown", "five"])
    assert bad.value.code == 2


def test_check_reads_device_time_when_asked(tmp_path: Path) -> None:
    def device_run(path: Path, kernel_us: float) -> Path:
        events = [{"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}}]
        for n in range(6):
            t = n * 1000.0
            d = kernel_us * (1 + 0.01 * n)
            events += [
                op(f"ProfilerStep#{n + 1}", t, 900, cat="user_annotation", pid=1, tid=1),
                op("aten::mm", t + 10, 50, pid=1, tid=1),
                op("cudaLaunchKernel", t + 20, 10, cat="cuda_runtime", pid=1, tid=1, correlation=n + 1),
                op("gemm", t + 40, d, cat="kernel", pid=0, tid=7, correlation=n + 1),
            ]
        return write_trace(path, events)

    a, b = device_run(tmp_path / "a.json", 100), device_run(tmp_path / "b.json", 200)
    result = check(a, b, device=True)
    assert result.exit_code == 1 and result.items[0].what == "step time (device)"
    assert result.items[0].shift is not None and result.items[0].shift.ratio == pytest.approx(2.0)
    assert check(a, b).exit_code == 0  # the host's step time did not change


@pytest.mark.slow
def test_real_runs_against_themselves_claim_no_change(tmp_path: Path) -> None:
    """Real torch traces, their real spread: the same runs on both sides are no regression, whatever the machine.

    The new side holds the base's runs in another order: one set of samples on both sides, so
    the ratio is 1 and the interval holds 1 by construction, however calm the machine was.
    """
    torch = pytest.importorskip("torch")
    import neuronprof

    x = torch.randn(64, 64)
    need = min_samples(0.95)
    for run in range(need):
        with neuronprof.session(backend="cpu", output_dir=tmp_path / "out", wait=0, warmup=1, active=5) as s:
            for _ in s.steps():
                torch.tanh(x @ x)
        s.export(tmp_path / "base" / f"run{run}.pt.trace.json")
    (tmp_path / "new").mkdir()
    for run in range(need):
        shutil.copy(
            tmp_path / "base" / f"run{(run + 1) % need}.pt.trace.json", tmp_path / "new" / f"run{run}.pt.trace.json"
        )
    result = check(tmp_path / "base", tmp_path / "new", max_slowdown=0.5)
    # One set of samples on both sides: the interval holds 1 on every machine, so never a
    # regression (1); no change (0), or, where the runs spread wide enough to reach the
    # threshold too, cannot tell (2).
    assert result.exit_code in (0, 2), result.to_text()
    assert "REGRESSION" not in result.to_text()
    assert "each run's median step is a sample" in result.unit
    d = diff(tmp_path / "base", tmp_path / "new")
    assert d.step is not None and d.step.n_a == d.step.n_b == need
    payload = json.loads(d.to_json())
    assert payload["step"]["verdict"] in ("no measurable change", "cannot tell")
    assert payload["step"]["ratio"] == pytest.approx(1.0)
    assert d.step.low is None or d.step.low <= 1 <= (d.step.high or 1)


def test_the_reports_two_run_pane_gives_the_verdicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(17)
    a = str(_run_trace(tmp_path / "a.json", _draw(rng, 8, 1.0)))
    b = str(_run_trace(tmp_path / "b.json", _draw(rng, 8, 1.4)))
    out = tmp_path / "b.html"
    assert analysis_main(["report", b, "--baseline", a, "-o", str(out)]) == 0
    html = out.read_text()
    assert "Compared with the baseline" in html
    assert "Did it get faster?" in html and "step time (host): slower by" in html and "Verdict per step" in html
    assert analysis_main(["report", b, "-o", str(tmp_path / "alone.html")]) == 0
    assert "Compared with the baseline" not in (tmp_path / "alone.html").read_text()


@pytest.mark.slow
def test_sessions_are_compared_directly_and_in_their_report(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import neuronprof

    def run(size: int) -> neuronprof.Session:
        x = torch.randn(size, size)
        with neuronprof.session(backend="cpu", output_dir=tmp_path / "out", wait=0, warmup=1, active=4) as s:
            for _ in s.steps():
                torch.tanh(x @ x)
        return s

    before, after = run(16), run(16)
    trace = after.trace()
    assert len(trace.samples) == trace.steps == 4
    d = diff(before, after)
    assert d.step is not None and (d.step.n_a, d.step.n_b) == (4, 4)
    assert (d.a, d.b) == ("(a session)", "(a session)")
    page = after.report(tmp_path / "after.html", baseline=before).read_text()
    assert "Compared with the baseline" in page and "Did it get faster?" in page and "step time (host):" in page


def test_check_cannot_tell_says_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(23)
    base = str(_run_trace(tmp_path / "base.json", _draw(rng, 10, 1.0)))
    # Noisy and few: the interval holds both no change and a slowdown beyond 5%.
    noisy = [round(1000 * rng.lognormvariate(0, 0.4), 3) for _ in range(5)]
    wide = str(_run_trace(tmp_path / "wide.json", noisy))
    code, out = _gate(capsys, base, wide, "--max-slowdown", "5%")
    assert code == 2 and "the interval holds both no change and a slowdown beyond 5%: more samples" in out
    # A profile without steps; device time on a CPU-only profile.
    steps_free = str(write_trace(tmp_path / "nosteps.json", [op("aten::mm", 0, 50)]))
    code, out = _gate(capsys, base, steps_free)
    assert code == 2 and "B has no recorded steps (ProfilerStep#N spans)" in out
    code, out = _gate(capsys, base, base, "--device")
    assert code == 2 and "A has none of it in any recorded step" in out
    assert out.rstrip().splitlines()[-1].startswith("note: each step is a sample")


def test_an_op_not_in_every_step_gets_no_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def trace(path: Path, every: int, us: float) -> Path:
        events = []
        for n in range(10):
            t = n * 1000.0
            events.append(op(f"ProfilerStep#{n + 1}", t, 900, cat="user_annotation"))
            if n % every == 0:
                events.append(op("aten::foo", t + 10, us))
        return write_trace(path, events)

    a, b = trace(tmp_path / "a.json", 1, 100), trace(tmp_path / "b.json", 3, 300)
    d = diff(a, b)
    assert d.op_shift("aten::foo") is None
    assert any("no verdict per step for aten::foo: not in every recorded step" in n for n in d.notes)
    code, out = _gate(capsys, str(a), str(b), "--ops", "aten::foo")
    assert code == 2 and "B lacks it in 6 of its 10 recorded steps" in out


def test_a_folder_of_ranks_gets_no_verdict(tmp_path: Path) -> None:
    rng = random.Random(29)
    for side in ("a", "b"):
        for rank in range(4):
            _run_trace(tmp_path / side / f"rank-{rank}.json", _draw(rng, 6, 1.0))
    d = diff(tmp_path / "a", tmp_path / "b")
    assert d.step is None
    assert any("A is a folder of 4 ranks of one job" in n for n in d.notes)
    assert check(tmp_path / "a", tmp_path / "b").exit_code == 2


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-slowdown", "5", "'5' is ambiguous"),
        ("--max-slowdown", "nan", "expected a slowdown such as 5% or 0.05"),
        ("--max-slowdown", "2000%", "expected a slowdown from 0% to 1000%"),
        ("--confidence", "95", "'95' is ambiguous"),
        ("--confidence", "40%", "expected a confidence from 50% up to (not including) 100%"),
    ],
)
def test_check_refuses_ambiguous_thresholds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    a = str(_run_trace(tmp_path / "a.json", [1000.0] * 4))
    with pytest.raises(SystemExit) as refused:
        analysis_main(["check", a, a, f"{flag}={value}"])
    assert refused.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.slow
def test_a_long_run_is_judged_on_at_most_max_samples_blocks(tmp_path: Path) -> None:
    from neuronprof.analysis._samples import MAX_SAMPLES

    rng = random.Random(31)
    a = _run_trace(tmp_path / "a.json", _draw(rng, 1200, 1.0))
    b = _run_trace(tmp_path / "b.json", _draw(rng, 1200, 1.2))
    d = diff(a, b)
    assert d.step is not None and d.step.verdict == "slower"
    assert (d.step.n_a, d.step.n_b) == (MAX_SAMPLES, MAX_SAMPLES)
    assert any(f"each of at most {MAX_SAMPLES} blocks of consecutive steps" in n for n in d.notes)
