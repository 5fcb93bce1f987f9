"""specdec.stream: see README.md's architecture section."""
