"""specdec.store: see README.md's architecture section."""
