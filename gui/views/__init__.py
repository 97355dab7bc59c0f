"""What the docks show that is no dock: result views, the log's view, the OOM drawing, pure layout arithmetic."""
