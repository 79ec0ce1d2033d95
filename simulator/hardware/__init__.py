"""What a replica is and how fast it runs: GPUs, models, the performance model, the engine, cold starts, presets."""
