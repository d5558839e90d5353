"""The QSV ablation table (full QSV, no transport, uniform attention, standard attention,
flat lattice, ResNet-20) over seeds, with the paper's numbers beside ours.

    python benchmarks/qsv_ablation.py --dataset digits [--quick] [--analyse]
    python benchmarks/qsv_ablation.py --dataset cifar10 --root data/cifar --device cuda --analyse
    torchrun --nproc_per_node 4 benchmarks/qsv_ablation.py --dataset cifar10 --root data/cifar

The logic lives in :mod:`quest_geometric.experiments.qsv_ablation`.
"""
from quest_geometric.experiments.qsv_ablation import main

if __name__ == "__main__":
    main()
