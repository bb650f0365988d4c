"""Where the pipeline reads documents from: a local folder, or a DMS via its events."""
