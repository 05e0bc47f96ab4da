import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
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
