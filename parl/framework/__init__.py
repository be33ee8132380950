"""The computation group (Model, Algorithm, ComputationTask) and the agent group."""
