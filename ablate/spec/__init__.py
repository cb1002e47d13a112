"""Step 1, the sweep file: reading experiments.yaml, checking it, dotted config paths, the tune: block."""
