"""specdec.costmodel: see README.md's architecture section."""
