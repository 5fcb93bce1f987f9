"""specdec.pack: see README.md's architecture section."""
