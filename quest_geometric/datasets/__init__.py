"""quest_geometric.datasets."""
