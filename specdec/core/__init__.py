"""specdec.core: see README.md's architecture section."""
