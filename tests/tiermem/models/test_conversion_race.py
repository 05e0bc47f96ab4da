"""Two processes converting the packaged model at once (issue 66): the later one's rename meets the directory the
first put there; it uses that copy when it checks whole, and replaces a partial one."""

import json

from tiermem.models.cache import MANIFEST, check_entry, seal
from tiermem.models.specs import publish_conversion


def _conversion(path, weights):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (path / "model.safetensors").write_bytes(weights)
    return path


def test_the_loser_of_the_race_uses_the_winners_copy(tmp_path):
    target = _conversion(tmp_path / "smollm2-135m-instruct", b"winner")
    seal(target)  # the first process published its sealed conversion a moment ago
    mine = _conversion(tmp_path / ".smollm2-135m-instruct.x", b"loser")
    assert publish_conversion(mine, target) == target  # no OSError after a long labeling run
    assert not mine.exists() and (target / "model.safetensors").read_bytes() == b"winner"
    assert check_entry(target, deep=True) is None


def test_a_partial_copy_in_the_way_is_replaced(tmp_path):
    target = _conversion(tmp_path / "smollm2-135m-instruct", b"half")  # killed before it was sealed
    mine = _conversion(tmp_path / ".smollm2-135m-instruct.x", b"whole")
    publish_conversion(mine, target)
    assert (target / "model.safetensors").read_bytes() == b"whole" and (target / MANIFEST).is_file()
    assert check_entry(target, deep=True) is None
