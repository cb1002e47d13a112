"""Step 2, the plan: trial keys, grid expansion, adaptive seeds, tuned rounds, the model check, what `ablate plan`
prints."""
