"""The QSV study: layer speed, memory, compiled and CUDA timings, the forward breakdown,
the ablation table and kNN speed. See README.md."""
