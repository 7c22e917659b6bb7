"""Before booking nodes: a model's facts from its config, the memory and traffic each strategy needs (`eoscale
plan`), and the state a rank really holds (measured, to check the plan)."""
