import json

from benchmarks.compare_eval import differences, main


def test_timings_and_paths_aside_every_leaf_is_compared(tmp_path, capsys):
    before = {"meta": {"routing_wall_s": 1.0, "data_path": "/a"}, "policies": [{"auroc": 0.7, "mean_latency_s": 2}]}
    after = {"meta": {"routing_wall_s": 9.0, "data_path": "/b"}, "policies": [{"auroc": 0.7, "mean_latency_s": 5}]}
    assert differences(before, after) == []
    after["policies"][0]["auroc"] = 0.70000000001
    after["meta"]["new"] = 1
    assert differences(before, after) == [(".meta.new", "<missing>", 1), (".policies[0].auroc", 0.7, 0.70000000001)]
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, data in zip(paths, (before, after), strict=True):
        path.write_text(json.dumps(data))
    assert main([str(p) for p in paths]) == 1
    assert "1 values compared, 2 differ" in capsys.readouterr().out
    assert main([str(paths[0]), str(paths[0])]) == 0
