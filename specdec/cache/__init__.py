"""specdec.cache: see README.md's architecture section."""
