"""quest_geometric.testing."""
