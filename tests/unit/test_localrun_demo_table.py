"""The demo's verdict: its table says which step failed and why, and any failure means exit code 1."""

from __future__ import annotations

from localrun.demo import Measure, exit_code, summary_table


def test_all_measures_ok_exit_zero_and_rows_show_latencies() -> None:
    measures = [
        Measure("enable sample (regular)", "Manifest in KCP", 0.084),
        Measure("disable sample", "Manifest deleted in KCP", 1.5),
    ]
    table = summary_table(measures)
    lines = table.splitlines()
    assert lines[0].split() == ["step", "result", "latency"]
    assert lines[2].startswith("enable sample (regular)  Manifest in KCP")
    assert lines[2].endswith("84 ms  ok")
    assert lines[3].endswith("1500 ms  ok")
    assert lines[-1] == "2 of 2 ok"
    assert exit_code(measures) == 0


def test_a_failed_or_timed_out_measure_is_named_and_makes_the_exit_code_one() -> None:
    measures = [
        Measure("enable sample (regular)", "Manifest in KCP", 0.05),
        Measure("30 s outage", "no edit landed while cut", 30.0, error="landed during the outage: ConfigMap"),
        Measure("disable sample", "Manifest deleted in KCP", None, error="not within 60 s"),
    ]
    lines = summary_table(measures).splitlines()
    assert lines[3].endswith("30000 ms  FAILED (landed during the outage: ConfigMap)")
    assert lines[4].split("  ")[0] == "disable sample"
    assert lines[4].endswith(" -  FAILED (not within 60 s)")
    assert lines[-1] == "1 of 3 ok, 2 FAILED"
    assert exit_code(measures) == 1


def test_no_measure_at_all_is_a_failure() -> None:
    assert exit_code([]) == 1
