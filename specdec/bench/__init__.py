"""specdec.bench: see README.md's architecture section."""
