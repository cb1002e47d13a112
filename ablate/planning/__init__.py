"""Step 2, the plan: trial keys, grid expansion, designs, adaptive seeds, tuned rounds, what `ablate plan`
prints."""
