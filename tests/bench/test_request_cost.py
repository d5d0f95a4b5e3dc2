"""bench.request_cost's harness: each measurement runs against a real node and gives a CPU figure,
and --check turns a median over its budget into exit status 1. It asserts nothing about speed
(the budget is the bench command's to judge, on a quiet machine, not CI's)."""

from __future__ import annotations

import pytest

from bench import request_cost

pytestmark = pytest.mark.slow


def test_every_path_is_measured_and_check_fails_over_budget(capsys, monkeypatch):
    assert request_cost.main(["--runs", "1", "--requests", "100", "--warmup", "20"]) == 0
    out = capsys.readouterr().out
    for name in ("produce", "fetch", "fetch-64"):
        line = next(line for line in out.splitlines() if line.startswith(f"median {name:8s}:"))
        assert float(line.split(":")[1].split()[0]) > 0, line
    # A budget no request can meet: --check must fail the run, and without --check it must not.
    monkeypatch.setattr(request_cost, "BUDGET_US", dict.fromkeys(request_cost.MEASURES, 0.0))
    assert request_cost.main(["--runs", "1", "--requests", "50", "--warmup", "10", "--check"]) == 1
    assert "OVER" in capsys.readouterr().out
