"""quest_geometric.transforms."""
