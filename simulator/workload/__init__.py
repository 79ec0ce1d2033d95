"""What arrives: request traces (shipped data, per-minute histories) and how they are shaped."""
