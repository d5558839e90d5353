"""``python -m benchmarks.focus.pretrained``: Focus composed onto SmolLM2-135M (see the
package docstring and README.md for the commands)."""
from benchmarks._entry import require_smollm2

if __name__ == "__main__":
    require_smollm2()
    from benchmarks.focus.pretrained.cli import main

    main()
