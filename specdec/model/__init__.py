"""specdec.model: see README.md's architecture section."""
