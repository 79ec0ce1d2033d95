"""The bottom layer every part may import and that imports none of them: HTTP GET, Go durations,
proto generation, the `llm_*` vocabulary (the contract between exporter and scaler), one periodic worker."""
