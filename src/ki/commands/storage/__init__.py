"""Store and ingest: init, status, move, ingest, worker, reindex, delete, projects, events, config; the embedded writer rule."""
