"""quest_geometric.nn."""
