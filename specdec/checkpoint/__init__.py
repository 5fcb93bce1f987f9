"""specdec.checkpoint: see README.md's architecture section."""
