"""Geometry: Fibonacci spheres, exact kNN graphs with three back-ends, sphere and lattice graphs."""
from quest_geometric.geometry.fibonacci import GOLDEN_ANGLE, concentric_spheres, fibonacci_sphere
from quest_geometric.geometry.graphs import lattice_graph, sphere_graph
from quest_geometric.geometry.knn import (
    AUTO_BACKEND_NOTE, knn_bipartite, knn_graph, resolve_backend,
)

__all__ = ["fibonacci_sphere", "concentric_spheres", "GOLDEN_ANGLE", "knn_graph", "knn_bipartite",
           "resolve_backend", "AUTO_BACKEND_NOTE", "sphere_graph", "lattice_graph"]
