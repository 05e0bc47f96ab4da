import pytest

from benchmarks.common import PeakRSS, ratio, table
from benchmarks.run import DEFAULT_CONFIG, BenchConfig
from benchmarks.training_bench import TrainingBenchConfig
from benchmarks.training_bench import run as training_run
from tiermem.settings.config import ConfigError, parse_cli


def test_default_bench_config_parses():
    cfg = parse_cli(BenchConfig, [], default_config=DEFAULT_CONFIG)
    assert cfg.router.batch_sizes == [1, 8]
    assert cfg.training.variants == ["cpu_defaults", "trl_defaults"]
    cfg = parse_cli(BenchConfig, ["router.n_prompts=4", "training.enabled=false"], default_config=DEFAULT_CONFIG)
    assert cfg.router.n_prompts == 4 and not cfg.training.enabled
    with pytest.raises(ConfigError, match="n_promts"):
        parse_cli(BenchConfig, ["router.n_promts=4"], default_config=DEFAULT_CONFIG)


def test_unknown_training_variant_is_refused():
    with pytest.raises(ValueError, match="fp8"):
        training_run(TrainingBenchConfig(variants=["fp8"]))


def test_peak_rss_sees_an_allocation():
    with PeakRSS() as mem:
        block = bytearray(80 * 2**20)
        block[:: 4096] = b"x" * len(block[:: 4096])  # touch every page so it is resident
    assert mem.extra_mb > 60
    del block


def test_table_and_ratio():
    text = table(["a", "b"], [["x", 1.23456], ["yy", None]])
    assert text.splitlines()[0].startswith("a ") and "1.23" in text and "n/a" in text
    assert ratio(4.0, 2.0) == 2.0 and ratio(1.0, 0.0) is None and ratio(None, 1.0) is None


def test_bench_help_lists_every_section_key_and_exits_0(capsys):
    from benchmarks.run import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python benchmarks/run.py [--config PATH")
    for key in ("router.n_prompts", "reader.enabled", "training.variants", "output_dir"):
        assert key in out, key
