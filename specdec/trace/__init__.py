"""specdec.trace: routing traces (format.py: the directory format, hotlists); see README.md."""
