"""What runs over time: the event loop (Simulation), its detailed and fluid backends, pods and the gateway."""
