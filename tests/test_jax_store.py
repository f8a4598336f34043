"""What nkserde.processes.jax_service.JaxStore relies on of JAX's coordination
service, with 2 real processes: in the version tests, so it runs under the
oldest and newest JAX that CI installs (the service's errors are matched
by their status names)."""

from __future__ import annotations

import json

from pathlib import Path

from multiprocess import launch


def test_jax_coordination_service_behaves_as_the_store_expects(tmp_path):
    launch(2, ["store", tmp_path], worker=Path(__file__).with_name("_store_worker.py"))
    first, second = (json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2))
    for seen in (first, second):
        assert seen["dir"] == [["t/d/0", "value 0"], ["t/d/1", "value 1"]]
        assert seen["missing"] and seen["present"] and seen["exists"] and seen["put_again"]
    assert first["after_delete"] and first["get_timeout"] and first["barrier_timeout"]
    assert second["late_arrival"]
