"""The node agent: one per task on a compute node, between the job step and the runtime."""
