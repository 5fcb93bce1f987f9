"""specdec.sim: see README.md's architecture section."""
