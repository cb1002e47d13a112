"""Model probing, between the networks and the plan: build a trial's model and data and step them on CPU before
fan-out (`check`), and time a step of each architecture side by side (`steptime`). It builds what `nn` and `data`
declare, so it sits above both, and it reads no plan: planning, the launch and the report ask it."""
