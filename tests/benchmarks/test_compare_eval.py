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


def test_nan_equals_nan_and_types_count(tmp_path, capsys):
    same = tmp_path / "a.json"
    same.write_text('{"auroc": NaN, "ok": true, "n": 1}')
    assert main([str(same), str(same)]) == 0  # two identical files with NaN do not differ
    assert differences({"ok": True, "n": 1}, {"ok": 1, "n": 1.0}) == [(".n", 1, 1.0), (".ok", True, 1)]


def test_bad_input_is_a_named_data_error_with_its_own_exit_code(tmp_path, capsys):
    import os

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"auroc": 0.7}))
    bad = {"missing": tmp_path / "nope.json", "directory": tmp_path / "dir", "malformed": tmp_path / "m.json",
           "empty": tmp_path / "e.json", "latin-1": tmp_path / "l.json", "nested": tmp_path / "n.json",
           "a list": tmp_path / "list.json", "fifo": tmp_path / "fifo.json"}
    bad["directory"].mkdir()
    bad["malformed"].write_text("{oops")
    bad["empty"].write_text("")
    bad["latin-1"].write_bytes(b'{"q": "Qu\xe9"}')
    bad["nested"].write_text("[" * 5000 + "]" * 5000)
    bad["a list"].write_text("[1, 2]")
    os.mkfifo(bad["fifo"])
    for name, path in bad.items():
        for argv in ([str(good), str(path)], [str(path), str(good)]):
            assert main(argv) == 3, name  # never 1, which says "they differ"
            err = capsys.readouterr().err
            assert "error: DataError: " in err and str(path) in err, (name, err)
