"""The reference script's examples: its data part for a folder of photos, and for texts."""
