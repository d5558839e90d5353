"""The studies beside the library: one folder per study (``qsv/``, ``qk_geometry/``,
``focus/``), each with its logic, its commands (``python -m benchmarks.<study>.<name>``), a
README and its canonical results in ``results/``. Not part of the installed package."""
