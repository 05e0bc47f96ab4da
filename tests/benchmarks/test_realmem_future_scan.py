"""The scan of request-visible memory that is said after the request (benchmarks/realmem_future_scan.py)."""

from benchmarks.realmem_future_scan import scan
from tests.helpers.realmem_fixture import edited, write
from tests.tiermem.data.test_realmem import _chosen_later


def test_the_scan_finds_no_unit_seen_before_it_is_said(tmp_path, capsys):
    total = scan(str(write(tmp_path / "rm", edited(_chosen_later))))
    assert total["units"] == 0 and total["pairs"] == 0 and total["requests"] == 3
    assert "units seen before they are said: 0" in capsys.readouterr().out


def test_the_scan_counts_a_unit_placed_before_its_statement(tmp_path, monkeypatch):
    import tiermem.data.realmem as realmem

    # the snapshot trusted whatever its speaker (the loader before this rule): the decision is seen by the request
    monkeypatch.setattr(realmem, "_source_turn", lambda point, text, contents, where: (0, "snapshot"))
    total = scan(str(write(tmp_path / "rm", edited(_chosen_later))))
    assert total["units"] >= 1 and total["pairs"] >= 1
