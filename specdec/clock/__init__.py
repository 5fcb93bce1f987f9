"""specdec.clock: see README.md's architecture section."""
