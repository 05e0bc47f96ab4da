import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "helpers" / "fixtures"
SHARED_LOCOMO = ROOT.parent / "shared" / "data" / "locomo10_dev.json"

# Tests share 2 cores with nothing else; keep BLAS from oversubscribing.
os.environ.setdefault("TIERMEM_THREADS", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    """The development LoCoMo file; tests that need it skip cleanly when it is absent."""
    path = Path(os.environ.get("TIERMEM_LOCOMO", SHARED_LOCOMO))
    if not path.is_file():
        pytest.skip(f"LoCoMo data not found at {path} (set TIERMEM_LOCOMO)")
    return path


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


def _default_run_dirs() -> set[str]:
    """What lies under ./runs (two levels): the stages' default output directories, relative to the cwd."""
    runs = Path("runs")
    return {str(p) for p in runs.glob("*")} | {str(p) for p in runs.glob("*/*")} if runs.is_dir() else set()


@pytest.fixture(autouse=True)
def _no_output_in_the_default_run_dirs(request):
    """A test never writes into ./runs (a user's real runs live there): every output goes under tmp_path."""
    before = _default_run_dirs()
    yield
    new = sorted(_default_run_dirs() - before)
    if new:
        pytest.fail(f"{request.node.nodeid} wrote into the default run directories: {new}", pytrace=False)
