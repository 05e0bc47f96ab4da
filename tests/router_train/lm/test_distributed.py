"""SFT and GRPO data-parallel over two CPU processes (torch.distributed with the gloo backend), on the packaged base:
one adapter saved, by the main process only; the metadata written once; the same validation numbers as one
process with the same global batch.

Launched with `torchrun --nproc_per_node 2` and ACCELERATE_USE_CPU=true. `accelerate launch --num_processes 2
--cpu` is not used: in accelerate 1.15 it starts one process unless an MPI hostfile is given (docs/DESIGN.md,
"Training past one process")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.router_fixtures import build_label_dataset
from tests.helpers.servers import free_port
from tiermem.runs.run_meta import RUN_META_FILE, read_run_meta

ROOT = Path(__file__).resolve().parents[3]
BASE = "packaged:smollm2-135m-instruct"
LORA = ["lora.r=4", "lora.alpha=8", "lora.dropout=0.0", "lora.target_modules=[q_proj,v_proj]"]


def _launch(stage: str, args: list[str], processes: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    if processes == 1:
        cmd = [sys.executable, "-m", f"router_train.lm.{stage}", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
               "--master_port", str(free_port()),  # torchrun's port 0 never rendezvouses
               "-m", f"router_train.lm.{stage}", *args]
    # its own process group: a run that times out takes its workers with it
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=1200)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _sft_args(data: Path, out: Path, per_device_batch: int) -> list[str]:
    return [f"model={BASE}", f"data={data}", f"output_dir={out}", *LORA, "eval_generate_limit=0",
            "metrics_train_rows=4", "trainer.max_steps=2", f"trainer.per_device_train_batch_size={per_device_batch}",
            "trainer.learning_rate=1e-3", "trainer.logging_steps=1",
            "trainer.seed=0", "trainer.data_seed=0"]


def _weights_and_markers(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.suffix in (".safetensors", ".json") or p.name.startswith("."))


@pytest.mark.slow
def test_sft_and_grpo_on_two_cpu_processes(tmp_path):
    data = build_label_dataset(tmp_path / "dataset")
    two, one = tmp_path / "sft_2proc", tmp_path / "sft_1proc"
    run = _launch("sft", _sft_args(data, two, per_device_batch=2), processes=2)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("[sft] validation n=3") == 1  # the main process alone reports and writes the run
    meta = read_run_meta(two)
    assert meta.metrics["train"]["world_size"] == 2 and meta.metrics["train"]["global_batch_size"] == 4
    assert (two / "adapter_model.safetensors").is_file() and (two / RUN_META_FILE).is_file()
    assert not list(two.glob("*.tmp")) and not list(two.glob("rank*"))
    assert meta.metrics["validation"]["n"] == 3  # every validation row, not one process's share

    ref = _launch("sft", _sft_args(data, one, per_device_batch=4), processes=1)  # the same global batch
    assert ref.returncode == 0, ref.stderr[-3000:]
    ref_meta = read_run_meta(one)
    assert ref_meta.metrics["train"]["world_size"] == 1 and ref_meta.metrics["train"]["global_batch_size"] == 4
    got, want = meta.metrics["validation"], ref_meta.metrics["validation"]
    assert got["n"] == want["n"] and got["accuracy"] == want["accuracy"]
    assert got["mean_p_escalate"] == pytest.approx(want["mean_p_escalate"], abs=0.02)
    assert _weights_and_markers(two) == _weights_and_markers(one)

    grpo_out = tmp_path / "grpo_2proc"
    g = _launch("grpo", [f"router={two}", f"data={data}", f"output_dir={grpo_out}", "eval_generate_limit=0",
                         "metrics_train_rows=4", "trainer.max_steps=2", "trainer.per_device_train_batch_size=4",
                         "trainer.num_generations=4", "trainer.max_completion_length=8", "completion=text",
                         "trainer.learning_rate=5e-3", "trainer.logging_steps=1", "trainer.seed=0"], processes=2)
    assert g.returncode == 0, g.stderr[-3000:]
    assert g.stdout.count("[grpo] validation n=3") == 1
    gmeta = read_run_meta(grpo_out)
    assert gmeta.stage == "grpo" and gmeta.metrics["train"]["world_size"] == 2
    assert gmeta.metrics["validation"]["n"] == 3
    curves = json.loads((grpo_out / "reward_curves.json").read_text())
    assert [p["step"] for p in curves] == [1, 2]
