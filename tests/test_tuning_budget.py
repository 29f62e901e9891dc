"""Tuning options, presets and budgets."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tilecraft.tuning import PRESETS, Budget, MeasureSettings, TuningError, TuningOptions


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# presets -------------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["quick", "default", "thorough"])
def test_presets_fill_every_field_they_name(preset):
    options = TuningOptions(preset=preset)
    for name, value in PRESETS[preset].items():
        assert getattr(options, name) == value


def test_presets_grow_from_quick_to_thorough():
    quick, default, thorough = (TuningOptions(preset=p) for p in ("quick", "default", "thorough"))
    for name in ("trials", "seconds", "batch_size", "repeats", "min_seconds", "timeout_s"):
        assert getattr(quick, name) < getattr(default, name) < getattr(thorough, name), name
    assert quick.patience < default.patience and thorough.patience is None
    assert (quick.trials, default.trials, thorough.trials) == (32, 200, 1000)


def test_explicit_fields_override_the_preset():
    options = TuningOptions(preset="thorough", trials=7, repeats=2, patience=3)
    assert (options.trials, options.repeats, options.patience) == (7, 2, 3)
    assert options.seconds == PRESETS["thorough"]["seconds"]
    assert TuningOptions(trials=math.inf).trials == math.inf


def test_options_give_measure_settings_and_budgets():
    options = TuningOptions(preset="quick", timeout_s=2.5, measure_fraction=0.5)
    settings = options.measure_settings()
    assert settings == MeasureSettings(warmup=1, repeats=3, min_seconds=0.002, timeout_s=2.5,
                                       check=True, measure_fraction=0.5)
    budget = options.budget()
    assert (budget.trials, budget.seconds, budget.patience) == (32, 60.0, 16)
    assert TuningOptions(total_seconds=30).run_deadline(100.0) == 130.0
    assert TuningOptions().run_deadline(100.0) is None


@pytest.mark.parametrize("changes, phrase", [
    ({"preset": "fast"}, "unknown tuning preset 'fast'; use one of quick, default, thorough"),
    ({"trials": 0}, "trials=0 must be positive"),
    ({"trials": -3}, "trials=-3 must be positive"),
    ({"trials": 2.5}, "trials=2.5 must be a whole number"),
    ({"seconds": 0.0}, "seconds=0.0 must be positive"),
    ({"total_seconds": -1}, "total_seconds=-1 must be positive"),
    ({"batch_size": math.inf}, "batch_size=inf must be finite"),
    ({"repeats": "5"}, "repeats='5' is not a number"),
    ({"n_workers": 0}, "n_workers=0 must be positive"),
    ({"timeout_s": True}, "timeout_s=True is not a number"),
    ({"warmup": -1}, "warmup=-1 must be 0 or more"),
    ({"measure_fraction": 0}, "measure_fraction=0 must be in (0, 1]"),
    ({"measure_fraction": 1.5}, "measure_fraction=1.5 must be in (0, 1]"),
    ({"engine": ""}, "engine='' must be an engine name"),
    ({"seed": 1.5}, "seed=1.5 must be an integer"),
    ({"events": 42}, "events=42 must be a file path or a callable"),
])
def test_bad_options_name_the_field_and_the_fix(changes, phrase):
    with pytest.raises(TuningError) as info:
        TuningOptions(**changes)
    assert phrase in str(info.value)


def test_several_problems_are_reported_together():
    with pytest.raises(TuningError, match="trials=0 .*; repeats=0"):
        TuningOptions(trials=0, repeats=0)


# what tc.compile(tuning=...) accepts -------------------------------------------------------------
def test_coerce_accepts_what_compile_takes():
    assert TuningOptions.coerce(None) is None and TuningOptions.coerce(False) is None
    assert TuningOptions.coerce(True) == TuningOptions()
    assert TuningOptions.coerce("quick").trials == 32
    options = TuningOptions(seed=3)
    assert TuningOptions.coerce(options) is options
    assert TuningOptions.coerce({"preset": "thorough", "engine": "random"}).engine == "random"
    with pytest.raises(TuningError, match="unknown tuning option.*trails"):
        TuningOptions.coerce({"trails": 5})
    with pytest.raises(TuningError, match="got int"):
        TuningOptions.coerce(5)


def test_describe_is_json_and_names_a_callback(tmp_path):
    def on_event(event):
        return None

    described = TuningOptions(events=on_event, database=tmp_path / "db.sqlite").describe()
    assert described["events"] == "on_event" and described["database"].endswith("db.sqlite")
    assert json.loads(json.dumps(described))["trials"] == 200
    assert TuningOptions(events=Path("e.jsonl")).describe()["events"] == "e.jsonl"
    assert TuningOptions().replace(trials=9).trials == 9


# budgets -----------------------------------------------------------------------------------------
def test_trial_budget_limits_the_batches():
    budget = Budget(trials=10)
    assert budget.next_batch(4) == 4
    budget.record([3.0, 2.0, 1.0, math.inf])
    assert budget.used == 4 and budget.best == 1.0 and budget.remaining_trials == 6
    budget.record([1.0] * 4)
    assert budget.next_batch(4) == 2 and not budget.exhausted
    budget.record([0.5, 0.4])
    assert budget.exhausted and budget.stop_reason == "trials" and budget.next_batch(4) == 0


def test_seconds_budget_and_run_deadline():
    clock = FakeClock()
    budget = Budget(seconds=5.0, clock=clock)
    clock.now += 4.0
    assert budget.remaining_seconds == pytest.approx(1.0) and not budget.exhausted
    clock.now += 1.0
    assert budget.stop_reason == "seconds" and budget.next_batch(8) == 0
    deadline_budget = Budget(seconds=100.0, deadline=clock.now + 2.0, clock=clock)
    assert deadline_budget.remaining_seconds == pytest.approx(2.0)
    clock.now += 2.0
    assert deadline_budget.stop_reason == "deadline"
    options = TuningOptions(preset="quick", total_seconds=1.0)
    assert options.budget(options.run_deadline(clock.now), clock=clock).remaining_seconds == 1.0


def test_patience_stops_a_task_without_progress():
    budget = Budget(patience=3)
    budget.record([5.0, 4.0])
    budget.record([4.5, math.inf])
    assert not budget.exhausted and budget.since_best == 2
    budget.record([4.0])  # not better than the best
    assert budget.stop_reason == "patience"


def test_an_unlimited_budget_never_stops_by_itself():
    budget = Budget(trials=math.inf, seconds=None)
    budget.record([1.0] * 1000)
    assert not budget.exhausted and budget.next_batch(16) == 16
    assert "used=1000" in repr(budget)
