"""What a run says: summaries and tables, the oracle and lower bound, frontiers."""
