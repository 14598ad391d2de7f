"""A fault bench in the style of Jepsen for cairn's replication groups: see README.md."""
