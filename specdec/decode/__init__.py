"""specdec.decode: see README.md's architecture section."""
