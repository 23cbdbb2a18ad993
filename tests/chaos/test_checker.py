"""The checker on hand-made histories: a clean one passes, and for each rule a history
that breaks it is caught (and a near miss that keeps it is not)."""

from __future__ import annotations

from pathlib import Path

from tests.chaos import checker
from tests.chaos.checker import StoredJob
from tests.chaos.history import History, Recorder, Write

VT = 2.0


def claim(h: History, job: str, tok: str, t: float, pid: int = 1, att: int = 1) -> None:
    h.add({"e": "claim", "pid": pid, "job": job, "tok": tok, "att": att, "t0": t, "t1": t + 0.01})


def run(
    h: History,
    job: str,
    tok: str,
    start: float,
    end: float | None,
    pid: int = 1,
    att: int = 1,
    ckey: str | None = None,
    limit: int | None = None,
) -> None:
    h.add(
        {
            "e": "start",
            "pid": pid,
            "job": job,
            "tok": tok,
            "att": att,
            "type": "t",
            "t": start,
            "ckey": ckey,
            "limit": limit,
        }
    )
    if end is not None:
        h.add(
            {
                "e": "end",
                "pid": pid,
                "job": job,
                "tok": tok,
                "att": att,
                "t": end,
                "outcome": "returned",
            }
        )


def write(
    h: History, job: str, tok: str, t: float, r: str = "completed", op: str = "complete"
) -> None:
    h.add(
        {"e": "write", "pid": 1, "op": op, "job": job, "tok": tok, "r": r, "t0": t, "t1": t + 0.01}
    )


def enqueue(h: History, job: str | None, t: float, key: str | None = None) -> None:
    h.add({"e": "enqueue", "pid": 9, "job": job, "type": "t", "key": key, "t0": t, "t1": t + 0.01})


def done(job: str, created: float = 0.0, finished: float = 1.0, **fields: object) -> StoredJob:
    values: dict[str, object] = {"status": "completed", "completed_attempts": 1, **fields}
    return StoredJob(id=job, type="t", created_at=created, finished_at=finished, **values)  # type: ignore[arg-type]


def clean() -> tuple[History, dict[str, StoredJob]]:
    """Two jobs, each enqueued, claimed, run and completed once."""
    h = History()
    for n, job in enumerate(("a", "b")):
        enqueue(h, job, n)
        claim(h, job, f"tok-{job}", n + 0.1)
        run(h, job, f"tok-{job}", n + 0.2, n + 0.3)
        write(h, job, f"tok-{job}", n + 0.4)
    return h, {"a": done("a", 0, 0.5), "b": done("b", 1, 1.5)}


def rules(violations: list[checker.Violation]) -> set[str]:
    return {v.rule for v in violations}


def test_a_clean_history_keeps_every_rule() -> None:
    h, jobs = clean()
    assert checker.check(h, jobs, visibility_timeout=VT) == []


def test_an_acknowledged_job_missing_from_the_store_is_lost() -> None:
    h, jobs = clean()
    del jobs["b"]
    assert rules(checker.check(h, jobs, visibility_timeout=VT)) == {"lost"}


def test_an_acknowledged_job_still_pending_or_active_is_unfinished() -> None:
    h, jobs = clean()
    jobs["a"] = StoredJob("a", "t", "pending", 0.0)
    jobs["b"] = StoredJob("b", "t", "active", 1.0)
    assert {(v.rule, v.job) for v in checker.check(h, jobs, visibility_timeout=VT)} == {
        ("unfinished", "a"),
        ("unfinished", "b"),
        ("stuck-active", "b"),
    }


def test_a_failed_job_is_reported_though_terminal() -> None:
    h, jobs = clean()
    jobs["a"] = done("a", status="failed", failure_kind="stalled", completed_attempts=0)
    assert rules(checker.lost_or_unfinished(h, jobs)) == {"not-completed"}


def test_a_refused_enqueue_is_not_expected_in_the_store() -> None:
    h, jobs = clean()
    h.add({"e": "enqueue-error", "pid": 9, "type": "t", "t0": 5, "t1": 5.1})
    assert checker.check(h, jobs, visibility_timeout=VT) == []
    assert h.enqueue_errors == 1


def test_two_acknowledged_completions_of_one_job_are_caught() -> None:
    h, jobs = clean()
    claim(h, "a", "tok-a2", 5.0, pid=2, att=2)
    run(h, "a", "tok-a2", 5.1, 5.2, pid=2, att=2)
    write(h, "a", "tok-a2", 5.3)
    assert "completed-twice" in rules(checker.check(h, jobs, visibility_timeout=VT))


def test_two_completed_attempts_in_the_store_are_caught() -> None:
    h, jobs = clean()
    jobs["a"] = done("a", 0, 0.5, completed_attempts=2)
    assert rules(checker.completed_twice(h, jobs)) == {"completed-twice"}


def test_a_handler_starting_after_its_job_was_terminal_is_caught() -> None:
    h, _ = clean()
    run(h, "a", "tok-a", 0.6, 0.7, pid=3)  # job a was completed at 0.41
    assert rules(checker.started_after_terminal(h)) == {"started-after-terminal"}


def test_a_handler_starting_after_the_store_finished_its_job_is_caught() -> None:
    h = History()
    claim(h, "a", "t1", 0.0)
    run(h, "a", "t1", 0.1, 0.2)
    write(h, "a", "t1", 0.3, r="error")  # the reply was lost; the store finished it at 0.31
    run(h, "a", "t2", 0.9, 1.0, pid=2, att=2)
    assert checker.started_after_terminal(h) == []
    violations = checker.started_after_terminal(h, {"a": done("a", 0.0, 0.31)})
    assert rules(violations) == {"started-after-terminal"}


def test_runs_overlapping_while_the_first_lease_was_live_are_caught() -> None:
    h = History()
    claim(h, "a", "t1", 0.0)
    h.add({"e": "beat", "pid": 1, "job": "a", "tok": "t1", "r": "applied", "t0": 1.0, "t1": 1.01})
    run(h, "a", "t1", 0.1, 5.0)
    claim(h, "a", "t2", 2.5, pid=2, att=2)  # lease live until at least 1.0 + VT = 3.0
    run(h, "a", "t2", 2.6, 2.7, pid=2, att=2)
    (violation,) = checker.overlapping_runs(h, VT)
    assert violation.rule == "overlap"


def test_runs_overlapping_after_the_first_lease_expired_are_allowed() -> None:
    h = History()
    claim(h, "a", "t1", 0.0)
    h.add({"e": "beat", "pid": 1, "job": "a", "tok": "t1", "r": "applied", "t0": 1.0, "t1": 1.01})
    run(h, "a", "t1", 0.1, 9.0)  # paused past its lease: renewals stopped at 1.0
    claim(h, "a", "t2", 3.2, pid=2, att=2)
    run(h, "a", "t2", 3.3, 3.4, pid=2, att=2)
    assert checker.overlapping_runs(h, VT) == []


def test_a_run_whose_job_a_drain_released_may_overlap_the_next_claim() -> None:
    h = History()
    claim(h, "a", "t1", 0.0)
    run(h, "a", "t1", 0.1, 1.6)  # still running when the drain's grace ran out at 1.0
    write(h, "a", "t1", 1.0, r="released", op="release")
    claim(h, "a", "t2", 1.02, pid=2, att=2)  # well inside the lease the claim began
    run(h, "a", "t2", 1.1, 1.2, pid=2, att=2)
    assert checker.overlapping_runs(h, VT) == []
    refused = History()  # a release refused for its lease ends nothing
    claim(refused, "a", "t1", 0.0)
    run(refused, "a", "t1", 0.1, 1.6)
    write(refused, "a", "t1", 1.0, r="lease-lost", op="release")
    claim(refused, "a", "t2", 1.02, pid=2, att=2)
    run(refused, "a", "t2", 1.1, 1.2, pid=2, att=2)
    assert rules(checker.overlapping_runs(refused, VT)) == {"overlap"}


def test_a_run_of_a_killed_process_ends_at_its_death() -> None:
    h = History()
    claim(h, "a", "t1", 0.0)
    run(h, "a", "t1", 0.1, None)  # never ended: its process was killed at 0.5
    h.deaths[1] = 0.5
    claim(h, "a", "t2", 0.6, pid=2, att=2)
    run(h, "a", "t2", 0.7, 0.8, pid=2, att=2)
    assert checker.overlapping_runs(h, VT) == []
    del h.deaths[1]  # alive and never ended: the second claim came while its lease held
    assert rules(checker.overlapping_runs(h, VT)) == {"overlap"}


def test_overlapping_runs_of_unknown_claims_are_caught() -> None:
    h = History()
    run(h, "a", "t1", 0.1, 1.0)
    run(h, "a", "t1", 0.5, 0.6, pid=2)
    assert rules(checker.overlapping_runs(h, VT)) == {"overlap"}


def test_more_runs_of_a_key_than_its_limit_are_caught() -> None:
    h = History()
    for n, (start, end) in enumerate([(0.0, 1.0), (0.5, 1.5), (0.9, 2.0)]):
        claim(h, f"j{n}", f"t{n}", start - 0.05)
        run(h, f"j{n}", f"t{n}", start, end, ckey="k", limit=2)
    (violation,) = checker.limit_exceeded(h, VT)
    assert violation.rule == "limit" and "3 runs" in violation.detail


def test_a_stale_run_past_its_lease_does_not_hold_its_key() -> None:
    h = History()
    claim(h, "j0", "t0", 0.0)
    run(h, "j0", "t0", 0.1, 8.0, ckey="k", limit=1)  # paused: its lease ran out by 2.01
    claim(h, "j1", "t1", 3.0)
    run(h, "j1", "t1", 3.1, 3.5, ckey="k", limit=1)
    assert checker.limit_exceeded(h, VT) == []


def test_runs_that_touch_do_not_exceed_a_limit() -> None:
    assert checker.most_at_once([(0.0, 1.0), (1.0, 2.0)])[0] == 1


def test_a_doubled_or_missed_tick_is_caught() -> None:
    ticks = [StoredJob(f"t{n}", "tick", "completed", 0.0, run_at=float(n)) for n in range(5)]
    assert checker.schedule_ticks(ticks, 1.0) == []
    doubled = [*ticks, StoredJob("x", "tick", "completed", 0.0, run_at=2.0)]
    assert rules(checker.schedule_ticks(doubled, 1.0)) == {"tick-twice"}
    missed = [t for t in ticks if t.run_at != 2.0]
    assert rules(checker.schedule_ticks(missed, 1.0)) == {"tick-missed"}


def test_a_tick_is_known_by_its_run_at_at_its_first_claim() -> None:
    h = History()
    ticks = [StoredJob(f"t{n}", "tick", "completed", 0.0, run_at=float(n)) for n in range(4)]
    moved = StoredJob("t4", "tick", "completed", 0.0, run_at=1.7)  # the reaper moved it on
    h.add(
        {"e": "claim", "pid": 1, "job": "t4", "tok": "x", "att": 1, "t0": 4, "t1": 4, "run_at": 4.0}
    )
    assert checker.schedule_ticks([*ticks, moved], 1.0, h) == []
    assert rules(checker.schedule_ticks([*ticks, moved], 1.0)) == {"tick-twice"}


def test_a_held_tick_copy_is_not_a_tick() -> None:
    ticks = [StoredJob(f"t{n}", "tick", "completed", 0.0, run_at=float(n)) for n in range(4)]
    held = StoredJob("h", "tick", "pending", 0.0, run_at=checker.HELD + 1e9)
    assert checker.schedule_ticks([*ticks, held], 1.0) == []


def test_two_jobs_of_one_key_outstanding_at_once_are_caught() -> None:
    h = History()
    first = done("a", created=0.0, finished=2.0, dedupe_key="k")
    second = done("b", created=1.0, finished=3.0, dedupe_key="k")
    assert rules(checker.dedupe_held(h, [first, second])) == {"dedupe"}
    later = done("b", created=2.5, finished=3.0, dedupe_key="k")
    assert checker.dedupe_held(h, [first, later]) == []


def test_an_enqueue_refused_while_no_job_held_its_key_is_caught() -> None:
    h = History()
    jobs = [done("a", created=0.0, finished=1.0, dedupe_key="k")]
    enqueue(h, None, 0.5, key="k")  # refused while a held it: right
    assert checker.dedupe_held(h, jobs) == []
    enqueue(h, None, 3.0, key="k")  # refused with the key free: wrong
    assert rules(checker.dedupe_held(h, jobs)) == {"dedupe"}


def test_a_key_is_held_until_the_finishing_write_was_acknowledged() -> None:
    h = History()
    jobs = [done("a", created=0.0, finished=1.0, dedupe_key="k")]  # stamped when first tried
    write(h, "a", "t1", 1.0)  # its completion retried, acknowledged at 4.01
    h.writes[-1] = Write(1, "complete", "a", "t1", "completed", 1.0, 4.01)
    enqueue(h, None, 3.0, key="k")  # refused while the write was still being retried
    assert checker.dedupe_held(h, jobs) == []


def test_a_journaled_step_that_runs_again_is_caught() -> None:
    h = History()
    h.add(
        {
            "e": "step",
            "pid": 1,
            "job": "o",
            "tok": "t1",
            "seq": 0,
            "name": "s",
            "t0": 0.0,
            "t1": 0.1,
        }
    )
    h.add(
        {
            "e": "write",
            "pid": 1,
            "op": "journal",
            "job": "o",
            "tok": "t1",
            "r": "applied",
            "t0": 0.2,
            "t1": 0.3,
            "steps": [0],
        }
    )
    assert checker.journaled_step_rerun(h) == []
    h.add(
        {
            "e": "step",
            "pid": 2,
            "job": "o",
            "tok": "t2",
            "seq": 0,
            "name": "s",
            "t0": 5.0,
            "t1": 5.1,
        }
    )
    assert rules(checker.journaled_step_rerun(h)) == {"step-rerun"}


def test_a_step_rerun_after_an_unacknowledged_journal_write_is_allowed() -> None:
    h = History()
    h.add(
        {
            "e": "step",
            "pid": 1,
            "job": "o",
            "tok": "t1",
            "seq": 0,
            "name": "s",
            "t0": 0.0,
            "t1": 0.1,
        }
    )
    h.add(
        {
            "e": "write",
            "pid": 1,
            "op": "journal",
            "job": "o",
            "tok": "t1",
            "r": "error",
            "t0": 0.2,
            "t1": 0.3,
            "steps": [0],
        }
    )
    h.add(
        {
            "e": "step",
            "pid": 2,
            "job": "o",
            "tok": "t2",
            "seq": 0,
            "name": "s",
            "t0": 5.0,
            "t1": 5.1,
        }
    )
    assert checker.journaled_step_rerun(h) == []


def test_history_files_are_read_back_and_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "w.jsonl", pid=7)
    rec.write("claim", job="a", tok="t", att=1, t0=0.0, t1=0.1)
    rec.write("start", job="a", tok="t", att=1, type="t", t=0.2)
    rec.close()
    with open(tmp_path / "w.jsonl", "a", encoding="utf-8") as torn:
        torn.write('{"e": "end", "pid": 7, "jo')  # the process was killed mid-line
    h = History.read([tmp_path / "w.jsonl"])
    assert [(c.pid, c.job) for c in h.claims] == [(7, "a")]
    assert h.runs[0].end is None


def test_a_tick_whose_first_claim_no_worker_recorded_may_fill_one_gap() -> None:
    """A claim whose reply was lost is in no worker's history; the reaper gives the job
    back with ``run_at`` moved on, so its tick's instant is unknown. It may fill one gap,
    not two, and the ticks around it are still checked."""
    h = History()
    ticks = [StoredJob(f"t{n}", "tick", "completed", 0.0, run_at=float(n)) for n in (0, 1, 3, 4)]
    for tick in ticks:
        h.add(
            {
                "e": "claim",
                "pid": 1,
                "job": tick.id,
                "tok": "x",
                "att": 1,
                "t0": tick.run_at,
                "t1": tick.run_at,
                "run_at": tick.run_at,
            }
        )
    lost = StoredJob("t2", "tick", "completed", 0.0, run_at=3.1, attempts_ended=2)
    h.add(
        {
            "e": "claim",
            "pid": 1,
            "job": "t2",
            "tok": "y",
            "att": 2,
            "t0": 3.1,
            "t1": 3.1,
            "run_at": 3.1,
        }
    )
    assert checker.schedule_ticks([*ticks, lost], 1.0, h) == []
    # Without the store's count of ended claims, the moved run_at is a second job for tick 3.
    seen = StoredJob("t2", "tick", "completed", 0.0, run_at=3.1, attempts_ended=1)
    assert rules(checker.schedule_ticks([*ticks, seen], 1.0, h)) == {"tick-twice", "tick-missed"}
    # One unknown instant does not cover two missing ticks.
    fewer = [t for t in ticks if t.id != "t3"]
    assert rules(checker.schedule_ticks([*fewer, lost], 1.0, h)) == {"tick-missed"}
