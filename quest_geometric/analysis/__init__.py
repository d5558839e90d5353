"""quest_geometric.analysis."""
