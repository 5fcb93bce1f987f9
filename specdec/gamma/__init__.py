"""specdec.gamma: see README.md's architecture section."""
